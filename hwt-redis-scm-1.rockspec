package = "hwt-redis"
version = "scm-1"
source = {
   url = "git+https://example.invalid/hwt.git",
}
description = {
   summary = "hwt.redis: a Redis client for Lua 5.1-5.4 and LuaJIT over libhiredis",
   detailed = [[
A thin Redis client in C over libhiredis, shaped like redis-lua: commands as
methods, replies as redis-lua gives them, error replies raised as
"redis error: ...", timeouts per reply, and what an event loop needs to
listen for Pub/Sub messages (getfd, dirty, send, ready_replies). hwt.jobs
takes it as its client. A rock of its own, so that the hwt rock needs no
library.
]],
   license = "MIT",
}
dependencies = {
   "lua >= 5.1",
}
external_dependencies = {
   HIREDIS = { header = "hiredis/hiredis.h", library = "hiredis" },
}
-- Built by the Makefile (`make rock-redis`, `make rock-redis-install`) into
-- build/rock-<interpreter>/, as hwt-scm-1.rockspec builds hwt.core.
build = {
   type = "make",
   build_target = "rock-redis",
   build_variables = {
      CFLAGS = "$(CFLAGS)",
      LIBFLAG = "$(LIBFLAG)",
      LUA_INCDIR = "$(LUA_INCDIR)",
      HIREDIS_INCDIR = "$(HIREDIS_INCDIR)",
      HIREDIS_LIBDIR = "$(HIREDIS_LIBDIR)",
      ROCK_LUA = "$(LUA)",
   },
   install_target = "rock-redis-install",
   install_variables = {
      INST_LIBDIR = "$(LIBDIR)",
      ROCK_LUA = "$(LUA)",
   },
}
