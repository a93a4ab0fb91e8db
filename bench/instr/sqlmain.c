/* The SQLite workload of bench/instr's cost run (issue 35: "sqlite --all",
 * every function of the amalgamation instrumented): an in-memory database,
 * N rows inserted through a prepared statement in one transaction, an
 * index built, then aggregate, join, sort, LIKE and update queries. Prints
 * a checksum of every result, so each method's output can be compared. */
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

static unsigned long long sum;

static int row(void *u, int n, char **v, char **names) {
  (void)u, (void)names;
  for (int i = 0; i < n; i++)
    for (const char *p = v[i] ? v[i] : "NULL"; *p; p++) sum = sum * 31 + (unsigned char)*p;
  return 0;
}

static void run(sqlite3 *db, const char *sql) {
  char *err = 0;
  if (sqlite3_exec(db, sql, row, 0, &err) != SQLITE_OK) {
    fprintf(stderr, "sqlmain: %s: %s\n", sql, err);
    exit(1);
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  sqlite3 *db;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) return 1;
  run(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b INTEGER, c TEXT, d REAL)");
  run(db, "CREATE TABLE u(k INTEGER PRIMARY KEY, name TEXT)");
  run(db, "BEGIN");
  sqlite3_stmt *ins;
  sqlite3_prepare_v2(db, "INSERT INTO t(b, c, d) VALUES (?1, ?2, ?3)", -1, &ins, 0);
  char buf[64];
  for (int i = 0; i < n; i++) {
    int len = snprintf(buf, sizeof buf, "name-%d-%d", (i * 7919) % 1000, i);
    sqlite3_bind_int(ins, 1, (i * 2654435761u) % 1000);
    sqlite3_bind_text(ins, 2, buf, len, SQLITE_TRANSIENT);
    sqlite3_bind_double(ins, 3, i * 0.5);
    sqlite3_step(ins);
    sqlite3_reset(ins);
  }
  sqlite3_finalize(ins);
  for (int k = 0; k < 1000; k++) {
    snprintf(buf, sizeof buf, "INSERT INTO u VALUES (%d, 'u%d')", k, k * 13);
    run(db, buf);
  }
  run(db, "COMMIT");
  run(db, "CREATE INDEX tb ON t(b)");
  run(db, "SELECT b, count(*), sum(d), max(c) FROM t GROUP BY b ORDER BY 2 DESC, 1 LIMIT 50");
  run(db, "SELECT u.name, count(*) FROM t JOIN u ON u.k = t.b WHERE t.d > 100 GROUP BY u.name ORDER BY 2, 1 LIMIT 20");
  run(db, "SELECT count(*) FROM t WHERE c LIKE '%-99%'");
  run(db, "SELECT c FROM t ORDER BY c DESC LIMIT 10");
  run(db, "UPDATE t SET d = d * 2 WHERE b < 100");
  run(db, "SELECT sum(d), avg(b), total(a) FROM t");
  for (int k = 0; k < 2000; k++) {
    snprintf(buf, sizeof buf, "SELECT count(*), sum(d) FROM t WHERE b = %d", k % 1000);
    run(db, buf);
  }
  sqlite3_close(db);
  printf("%llu\n", sum);
  return 0;
}
