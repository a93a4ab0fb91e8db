/* A fast-path test guest: calls getppid N times, exits 0 if every call
 * returned EXPECTED (argv[1]); prints the first mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	long want = atol(argv[1]), n = atol(argv[2]);
	for (long i = 0; i < n; i++) {
		long r = syscall(SYS_getppid);
		if (r != want) {
			fprintf(stderr, "call %ld: getppid = %ld, want %ld\n", i, r, want);
			return 1;
		}
	}
	return 0;
}
