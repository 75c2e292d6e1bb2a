package = "hwt"
version = "scm-1"
source = {
   url = "git+https://example.invalid/hwt.git",
}
description = {
   summary = "A hashed-wheel timer for Lua: C wheel, worker thread, cancellable timeouts",
   detailed = [[
hwt gives Lua programs Netty's HashedWheelTimer model: a C timing wheel driven
by a worker thread that never touches Lua, a thread-safe completion queue, and
timer:poll() to run due tasks. O(1) schedule and cancel, no wake-ups while idle.
]],
   license = "MIT",
}
dependencies = {
   "lua >= 5.1",
}
-- Built by the Makefile (`make rock`, `make rock-install`) into
-- build/rock-<interpreter>/, so that no build lands where `make` or a build
-- for another Lua would pick it up.
build = {
   type = "make",
   build_target = "rock",
   build_variables = {
      CFLAGS = "$(CFLAGS)",
      LIBFLAG = "$(LIBFLAG)",
      LUA_INCDIR = "$(LUA_INCDIR)",
      ROCK_LUA = "$(LUA)",
   },
   install_target = "rock-install",
   install_variables = {
      INST_LIBDIR = "$(LIBDIR)",
      INST_LUADIR = "$(LUADIR)",
      ROCK_LUA = "$(LUA)",
   },
}
