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
build = {
   type = "builtin",
   modules = {
      ["hwt"] = "lua/hwt.lua",
      ["hwt.ngx"] = "lua/hwt/ngx.lua",
      ["hwt.luv"] = "lua/hwt/luv.lua",
      ["hwt.cqueues"] = "lua/hwt/cqueues.lua",
      ["hwt.driver"] = "lua/hwt/driver.lua",
      ["hwt.core"] = {
         sources = { "src/wheel.c", "src/engine.c", "src/lhwt.c" },
         libraries = { "pthread", "dl" },
         defines = {},
         incdirs = { "src" },
      },
   },
}
