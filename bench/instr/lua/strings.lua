-- String and table work: build words, count them in a hash table, sort,
-- format, concatenate, pattern-match (the string library and table code).
local rounds = tonumber(... or 20)
local seed = 42
local function rand(n)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n
end
local letters = "etaoinshrdlucmfwypvbgkqjxz"
local total, distinct = 0, 0
for r = 1, rounds do
  local counts = {}
  for _ = 1, 20000 do
    local len = 2 + rand(6)
    local t = {}
    for i = 1, len do
      local k = rand(#letters) + 1
      t[i] = letters:sub(k, k)
    end
    local w = table.concat(t)
    counts[w] = (counts[w] or 0) + 1
  end
  local words = {}
  for w in pairs(counts) do words[#words + 1] = w end
  table.sort(words, function(a, b)
    if counts[a] ~= counts[b] then return counts[a] > counts[b] end
    return a < b
  end)
  local parts = {}
  for i = 1, 50 do parts[i] = string.format("%s=%d", words[i], counts[words[i]]) end
  local line = table.concat(parts, " ")
  local vowels = select(2, line:gsub("[aeiou]", ""))
  total = total + vowels
  distinct = distinct + #words
  if r == rounds then print(line:sub(1, 60)) end
end
print(total, distinct)
