-- Recursive Fibonacci: function calls and returns, integer arithmetic.
local n = tonumber(... or 30)
local function fib(k)
  if k < 2 then return k end
  return fib(k - 1) + fib(k - 2)
end
print(n, fib(n))
