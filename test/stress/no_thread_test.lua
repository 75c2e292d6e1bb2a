-- What hwt does when the system refuses it a thread: run under the
-- test/stress/no_thread.c shim (LD_PRELOAD), whose pthread_create always fails.
-- Last line: "no thread: N passed, N failed".
local hwt = require("hwt")
local NO_THREAD = "cannot start the timer's worker thread"
local passed, failed = 0, 0

local function check(ok, label)
  if ok then passed = passed + 1 else failed = failed + 1 end
  print((ok and "ok     " or "FAILED ") .. label)
end

local timer = hwt.new({ tick = 0.001 })
local fd, err = timer:fd()
check(fd == nil and err == NO_THREAD, "fd() returns nil and why: " .. tostring(fd) .. ", " .. tostring(err))
fd, err = timer:fd()
check(fd == nil and err == NO_THREAD, "a second fd() refuses again (nothing was watched)")

local ran = 0
check(timer:timeout(0.005, function() ran = ran + 1 end) ~= nil, "timeout() needs no thread")
check(timer:run() == 1 and ran == 1, "wait() and poll() run it without one")
check(timer:pending() == 0 and #timer:stop() == 0, "nothing is left pending, and stop() works")

local other = hwt.new()
local handle, why = require("hwt.luv").attach(other)
check(handle == nil and why == NO_THREAD, "hwt.luv's attach returns nil and why: " .. tostring(why))
handle, why = require("hwt.cqueues").attach(other, require("cqueues").new())
check(handle == nil and why == NO_THREAD, "hwt.cqueues' attach returns nil and why: " .. tostring(why))
other:stop()

print(("no thread: %d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and 0 or 1)
