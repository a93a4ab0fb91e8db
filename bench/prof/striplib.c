/*
 * A library whose hot code has no symbol once stripped: lib_work (the one
 * export, in .dynsym) calls two static functions, which `strip` leaves
 * nameless. The profiler must list their addresses separately
 * (libstrip.so+0x...), not fold them into one [unknown] row.
 */
__attribute__((noinline)) static void hidden_one(long n)
{
	volatile long x = 0;

	for (long i = 0; i < n; i++)
		x += i;
}

__attribute__((noinline)) static void hidden_two(long n)
{
	volatile long x = 1;

	for (long i = 0; i < n; i++)
		x ^= i;
}

void lib_work(long n)
{
	hidden_one(n / 2);
	hidden_two(n / 2);
}
