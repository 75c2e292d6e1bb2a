/*
 * hwt.h — embedding hwt in a C host, including hosts that run several
 * lua_States on several threads (one state per thread at a time, as Lua
 * requires).
 *
 * What is shared: real-clock timers created with the same `tick` and
 * `wheel_size` share one engine — one wheel, one lock and one worker
 * thread — across every state of the process (hwt.new{shared = false} opts
 * out; manual-clock timers never share). The worker starts with the first
 * timeout and exits when the engine's last timer is stopped or collected.
 *
 * What is not: each timer has its own due queue, fd(), max_pending,
 * on_error, stats() counters and stop(). A timeout only ever runs inside
 * poll()/run()/advance() of the timer that created it, so in the state and
 * on the thread that call them; the worker thread never touches a lua_State.
 */
#ifndef HWT_H
#define HWT_H

#include <lua.h>

/* The module is built with hidden visibility (Makefile): only these two
 * names are exported, so its internal calls bind directly, and its engine's
 * names (wheel_insert, tq_schedule, ...) cannot clash with another
 * library's in the host. */
#if defined(__GNUC__)
#define HWT_EXPORT __attribute__((visibility("default")))
#else
#define HWT_EXPORT
#endif

/* The module loader: pushes the hwt.core table (what require returns). */
HWT_EXPORT int luaopen_hwt_core(lua_State *L);

/* Registers luaopen_hwt_core as package.preload["hwt.core"], for hosts that
 * link hwt statically; then require("hwt.core") works, and require("hwt")
 * too when lua/hwt.lua is on package.path. Needs the package library. */
HWT_EXPORT void hwt_preload(lua_State *L);

#endif
