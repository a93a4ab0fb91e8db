// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// bench/sleep/hog.c: a CPU-bound background task (spins until killed).
int main(void)
{
	for (volatile unsigned long i = 0;; i++)
		;
}
