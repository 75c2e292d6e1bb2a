/*
 * lhwt.c — the module hwt.core: its method tables and luaopen_hwt_core.
 * The binding's parts are in src/lhwt_*.c; lhwt.h says what they share.
 */
#include "lhwt.h"

/* ---- registration ----------------------------------------------------- */

static int do_nothing(lua_State *L) {
  (void)L;
  return 0;
}

/* poll, run and advance are lua/hwt.lua's: they call tasks (see dispatch).
 * On LuaJIT so are timeout and every (lua/hwt/jit.lua). */
static const luaL_Reg timer_methods[] = {
#if !COMPAT_FFI
  {"timeout", timer_timeout}, {"every", timer_every},
#endif
  {"wait", timer_wait},
  {"pending", timer_pending}, {"now", timer_now}, {"fd", timer_fd},
  {"next_due", timer_next_due}, {"on_earlier", timer_on_earlier},
  {"timeouts", timer_timeouts}, {"stats", timer_stats}, {"stop", timer_stop}, {NULL, NULL}
};

static const luaL_Reg timer_metamethods[] = {
  {"__gc", timer_gc}, {"__close", timer_close}, {"__tostring", timer_tostring},
  {NULL, NULL}
};

#if !COMPAT_FFI
static const luaL_Reg timeout_methods[] = {
  {"cancel", timeout_cancel}, {"is_cancelled", timeout_is_cancelled},
  {"is_expired", timeout_is_expired}, {"timer", timeout_timer},
  {"task", timeout_task}, {"remaining", timeout_remaining_seconds},
  {"reset", timeout_reset}, {"deadline", timeout_deadline}, {NULL, NULL}
};

static const luaL_Reg timeout_metamethods[] = {
  {"__close", timeout_close}, {"__tostring", timeout_tostring}, {NULL, NULL}
};
#endif

static const luaL_Reg module_functions[] = {
  {"new", hwt_new}, {"now", hwt_now}, {NULL, NULL}
};

/* For lua/hwt.lua alone (core.internal; not exported by hwt). */
static const luaL_Reg internal_functions[] = {
#if !COMPAT_FFI
  {"drain", internal_drain}, {"take", internal_take}, {"args", internal_args},
  {"finish", internal_finish}, {"recycle", internal_recycle},
  {"current", internal_current}, {"hand", internal_hand}, {"unhand", internal_unhand},
#endif
  {"probe", internal_probe}, {"traceback", traceback_handler},
  {"report_error", internal_report_error}, {"advance_clock", internal_advance_clock},
  {"clock_mark", internal_clock_mark}, {"step_to", internal_step_to},
  {"clock_state", internal_clock_state},
#if COMPAT_CALLK
  {"run_batch", internal_run_batch}, {"poll", internal_poll},
#endif
  {NULL, NULL}
};

/* Sets the functions of `functions` into the table at the top, each with the
 * module's upvalues (at upvalues_idx ...). */
static void set_module_functions(lua_State *L, int upvalues_idx, const luaL_Reg *functions) {
  for (int i = 0; i < MODULE_UPVALUES; i++) lua_pushvalue(L, upvalues_idx + i);
  luaL_setfuncs(L, functions, MODULE_UPVALUES);
}

/* Fills the metatable at mt_idx: its metamethods, its name, __metatable (a
 * script must not reach __gc) and an __index table of methods, which it
 * leaves on the stack. */
static void fill_class(lua_State *L, int mt_idx, int upvalues_idx, const char *name,
                       const luaL_Reg *meta, const luaL_Reg *methods) {
  lua_pushvalue(L, mt_idx);
  set_module_functions(L, upvalues_idx, meta);
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__name");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__metatable");
  lua_newtable(L);
  set_module_functions(L, upvalues_idx, methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__index");
  lua_remove(L, -2);
}

int luaopen_hwt_core(lua_State *L) {
  keep_library_loaded();
  luaL_newmetatable(L, TIMER_MT);
  int mts_idx = lua_gettop(L);
  luaL_newmetatable(L, TIMEOUT_MT);
  make_internal_metatable(L, QUEUE_MT, queue_gc);
  make_internal_metatable(L, DRAIN_MT, drain_gc);
  push_state_timers(L);
  luaL_getmetatable(L, DRAIN_MT);
  lua_pushcfunction(L, do_nothing);
#if COMPAT_CALLK
  for (int i = 0; i < MODULE_UPVALUES - 1; i++) lua_pushvalue(L, mts_idx + i);
  lua_pushcclosure(L, internal_run_batch, MODULE_UPVALUES - 1);
#else
  lua_pushnil(L);
#endif
  lua_newtable(L);
  int module_idx = lua_gettop(L);
  set_module_functions(L, mts_idx, module_functions);
  lua_newtable(L);
  set_module_functions(L, mts_idx, internal_functions);
  open_holds(L, mts_idx);
  lua_setfield(L, module_idx, "internal");
  fill_class(L, mts_idx, mts_idx, TIMER_MT, timer_metamethods, timer_methods);
  lua_setfield(L, module_idx, "Timer");
#if !COMPAT_FFI
  fill_class(L, mts_idx + 1, mts_idx, TIMEOUT_MT, timeout_metamethods, timeout_methods);
  lua_setfield(L, module_idx, "Timeout");
#endif
  lua_pushliteral(L, HWT_VERSION);
  lua_setfield(L, module_idx, "_VERSION");
  return 1;
}

void hwt_preload(lua_State *L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_hwt_core);
  lua_setfield(L, -2, "hwt.core");
  lua_pop(L, 2);
}
