/* The Lua workload's driver: lua-src vendors Lua 5.4's library but not its
 * standalone interpreter (lua.c), so this is the smallest one: run the
 * script argv[1] with argv[2..] as `...`, print its error and exit 1 on
 * failure. Everything the benchmark measures runs in Lua's own code. */
#include <stdio.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s script.lua [args]\n", argv[0]);
    return 2;
  }
  lua_State *L = luaL_newstate();
  if (L == NULL) return 1;
  luaL_openlibs(L);
  int status = luaL_loadfile(L, argv[1]);
  if (status == LUA_OK) {
    for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
    status = lua_pcall(L, argc - 2, 0, 0);
  }
  if (status != LUA_OK) fprintf(stderr, "%s: %s\n", argv[0], lua_tostring(L, -1));
  lua_close(L);
  return status == LUA_OK ? 0 : 1;
}
