package = "hwt"
version = "scm-1"
source = {
   url = "git+https://example.invalid/hwt.git",
}
description = {
   summary = "A hashed-wheel timer for Lua: C wheel, worker thread, cancellable timeouts",
   detailed = [[
hwt gives Lua programs Netty's HashedWheelTimer model: a C timing wheel,
cancellable timeout handles, and timer:poll() to run due tasks on your own
thread, in deadline order. O(1) schedule and cancel, no wake-ups while idle.
Drivers for nginx/OpenResty, luv and cqueues; durable jobs on Redis (hwt.jobs).
]],
   license = "MIT",
}
dependencies = {
   "lua >= 5.1",
}
-- Built by the Makefile (`make rock`, `make rock-install`) into
-- build/rock-<interpreter>/, so that no build lands where `make` or a build
-- for another Lua would pick it up. rock-install also puts the LuaLS
-- annotations (library/) in the rock's directory: add
-- `$(luarocks show --rock-dir hwt)/library` to .luarc.json's workspace.library.
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
      INST_PREFIX = "$(PREFIX)",
      ROCK_LUA = "$(LUA)",
   },
}
