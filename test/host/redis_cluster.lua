-- A private Redis Cluster for the tests of hwt.jobs' shards: n primaries
-- (no replicas) on 127.0.0.1, joined by `redis-cli --cluster create`,
-- which gives them equal slot ranges in the order named; every wait
-- bounded; stopped by PID.
local redis_server = require("redis_server")

local M = {}

local NODE_TIMEOUT_MS = 3000    -- a node down for less is not failed over (there are no replicas anyway)
local READY_TIMEOUT = 20        -- seconds for every node to report cluster_state:ok

local Cluster = {}
Cluster.__index = Cluster

-- `redis-cli -p port ...`'s output.
function Cluster:cli(port, command)
  return redis_server.shell(("redis-cli -p %d %s 2>&1"):format(port, command))
end

-- Every node reports cluster_state:ok.
function Cluster:ready()
  for _, node in ipairs(self.nodes) do
    if not self:cli(node.port, "cluster info"):find("cluster_state:ok", 1, true) then return false end
  end
  return true
end

-- Waits until every node reports cluster_state:ok; false after READY_TIMEOUT.
function Cluster:wait_ready()
  return redis_server.wait_until(function() return self:ready() end, READY_TIMEOUT)
end

-- The index of the node that owns `slot`, as each node tells of itself
-- (the "myself" line of its CLUSTER NODES).
function Cluster:owner(slot)
  for i, node in ipairs(self.nodes) do
    local mine = self:cli(node.port, "cluster nodes"):match("[^\n]*myself[^\n]*")
    for low, high in (mine or ""):gmatch(" (%d+)%-(%d+)") do
      if slot >= tonumber(low) and slot <= tonumber(high) then return i end
    end
  end
end

function Cluster:destroy()
  for _, node in ipairs(self.nodes) do node:destroy() end
end

-- M.start(n, { durable = bool }) -> a cluster of n running nodes: .nodes
-- (redis_server's servers), :cli(port, command), :owner(slot),
-- :wait_ready(), :destroy().
function M.start(n, opts)
  local cluster = setmetatable({ nodes = {} }, Cluster)
  local ok, err = pcall(function()
    local addresses = {}
    for i = 1, n do
      cluster.nodes[i] = redis_server.start({ durable = opts and opts.durable,
                                              cluster_node_timeout_ms = NODE_TIMEOUT_MS })
      addresses[i] = "127.0.0.1:" .. cluster.nodes[i].port
    end
    local out = redis_server.shell("redis-cli --cluster create " .. table.concat(addresses, " ")
                                   .. " --cluster-replicas 0 --cluster-yes 2>&1")
    assert(out:find("All 16384 slots covered", 1, true), "redis-cli --cluster create failed: " .. out)
    assert(cluster:wait_ready(), "the cluster was not ready within " .. READY_TIMEOUT .. " s")
  end)
  if not ok then
    cluster:destroy()
    error(err, 0)
  end
  return cluster
end

return M
