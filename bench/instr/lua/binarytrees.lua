-- The Computer Language Benchmarks Game's binary-trees, written after its
-- Lua program: allocation and garbage collection of small tables.
local function bottomup(depth)
  if depth == 0 then return {} end
  depth = depth - 1
  return { bottomup(depth), bottomup(depth) }
end

local function check(tree)
  if tree[1] then return 1 + check(tree[1]) + check(tree[2]) end
  return 1
end

local N = tonumber(... or 14)
local mindepth = 4
local maxdepth = math.max(mindepth + 2, N)
do
  local stretch = maxdepth + 1
  io.write("stretch tree of depth ", stretch, "\t check: ", check(bottomup(stretch)), "\n")
end
local longlived = bottomup(maxdepth)
for depth = mindepth, maxdepth, 2 do
  local iters = 2 ^ (maxdepth - depth + mindepth)
  local c = 0
  for _ = 1, iters do c = c + check(bottomup(depth)) end
  io.write(string.format("%d\t trees of depth %d\t check: %d\n", iters, depth, c))
end
io.write("long lived tree of depth ", maxdepth, "\t check: ", check(longlived), "\n")
