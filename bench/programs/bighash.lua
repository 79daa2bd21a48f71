-- bighash.lua — a multi-million-entry table read at random keys (a large-heap program).
--
-- usage: lua5.4 bighash.lua KEYS LOOKUPS SEED
--
-- Builds a table of KEYS string keys ("key:<i>") to string values of 4..40 characters,
-- then makes LOOKUPS look-ups of keys drawn by a seeded LCG (the generator of
-- churn.lua), one in sixteen of them rewriting the value; the heap is hundreds of MiB of
-- small blocks spread by the random keys over all of it. The output is counts and
-- checksums that depend on no address or table order, so every allocator must print the
-- same lines.

local KEYS = tonumber(arg[1]) or 3000000
local LOOKUPS = tonumber(arg[2]) or 6000000
local SEED = tonumber(arg[3]) or 1
local ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

local state = SEED * 6364136223846793005 + 1442695040888963407
local function next_r()
  state = state * 6364136223846793005 + 1442695040888963407
  return state >> 33
end

local t = {}
for i = 0, KEYS - 1 do
  local r = next_r()
  local c = r % 36 + 1
  t["key:" .. i] = string.rep(ALPHABET:sub(c, c), 4 + r % 37)
end
local total, rewritten = 0, 0
for _ = 1, LOOKUPS do
  local r = next_r()
  local key = "key:" .. (r % KEYS)
  local value = t[key]
  total = total + #value + value:byte(1)
  if r & 15 == 0 then
    if #value > 4 then t[key] = value:sub(2) .. value:sub(1, 1) else t[key] = value .. "x" end
    rewritten = rewritten + 1
  end
end
local count = 0
for _ in pairs(t) do count = count + 1 end
print(string.format("keys=%d lookups=%d", count, LOOKUPS))
print(string.format("checksum=%d rewritten=%d", total, rewritten))
print("last=" .. t["key:" .. (KEYS - 1)])
