-- churn.lua — a Lua 5.4 workload that churns tables and strings (the harness's "lua").
--
-- usage: lua5.4 churn.lua STEPS POPULATION SEED
--
-- Keeps a live population of POPULATION records (tables holding strings, arrays and
-- nested tables) and, at every step, replaces a random one, so the collector frees what
-- the steps before made; builds and cuts strings (format, concatenation, gsub, rep,
-- sub); counts words in a string-keyed map; every so often sorts a snapshot and
-- rebuilds an index. Everything comes from a seeded generator, and the output is
-- checksums that do not depend on the order pairs() visits a table or on any address,
-- so every allocator must print the same lines.

local steps = tonumber(arg[1]) or 200000
local POPULATION = tonumber(arg[2]) or 4096
local seed = tonumber(arg[3]) or 1

-- A 64-bit LCG (Knuth's MMIX constants); Lua integers wrap around.
local state = seed * 6364136223846793005 + 1442695040888963407
local function rand(n)
  state = state * 6364136223846793005 + 1442695040888963407
  return ((state >> 33) % n) + 1
end

-- The vocabulary: every word of two and of three syllables (1872 words).
local syllables = { "ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ze", "vu", "an", "or" }
local vocabulary = {}
for _, a in ipairs(syllables) do
  for _, b in ipairs(syllables) do
    vocabulary[#vocabulary + 1] = a .. b
    for _, c in ipairs(syllables) do
      vocabulary[#vocabulary + 1] = a .. b .. c
    end
  end
end
local function word()
  return vocabulary[rand(#vocabulary)]
end

local function fnv(s, h)
  h = h or 2166136261
  for i = 1, #s do
    h = ((h ~ s:byte(i)) * 16777619) & 0xffffffff
  end
  return h
end

local live = {}
local counts = {}
local made, dropped, text_bytes = 0, 0, 0

local function make_record(id)
  local name = word() .. "-" .. word()
  local tags = {}
  for i = 1, rand(8) do
    tags[i] = word()
  end
  local fields = {}
  for i = 1, rand(6) do
    fields[word()] = string.rep(syllables[rand(#syllables)], rand(24))
  end
  local line = string.format("%08d %s [%s]", id, name, table.concat(tags, ","))
  line = line:gsub("ka", "KA")
  made = made + 1
  text_bytes = text_bytes + #line
  return { id = id, name = name, tags = tags, fields = fields, line = line,
           pos = { x = rand(1000), y = rand(1000) } }
end

for i = 1, POPULATION do
  live[i] = make_record(i)
end

local digest = 0
for step = 1, steps do
  local slot = rand(POPULATION)
  local old = live[slot]
  -- count the words of the record that goes, as a string-keyed map of counters
  for _, t in ipairs(old.tags) do
    counts[t] = (counts[t] or 0) + 1
  end
  digest = fnv(old.line:sub(1, 12 + rand(16)), digest)
  live[slot] = make_record(POPULATION + step)
  dropped = dropped + 1

  if step % 2000 == 0 then
    -- prune the rare words, then a sorted snapshot of the names and an index rebuilt
    for w, c in pairs(counts) do
      if c < 3 then
        counts[w] = nil
      end
    end
    local names = {}
    for i = 1, POPULATION do
      names[i] = live[i].name .. "#" .. live[i].id
    end
    table.sort(names)
    local index = {}
    for i, n in ipairs(names) do
      index[n] = i
    end
    digest = fnv(names[1] .. names[#names], digest)
    digest = (digest + index[names[POPULATION // 2]]) & 0xffffffff
  end
end

-- order-independent summaries of the word counts
local distinct, total, longest = 0, 0, ""
for w, c in pairs(counts) do
  distinct = distinct + 1
  total = total + c
  if #w > #longest or (#w == #longest and w > longest) then
    longest = w
  end
end
local ids = 0
for i = 1, POPULATION do
  ids = ids + live[i].id
end

print(string.format("steps=%d made=%d dropped=%d", steps, made, dropped))
print(string.format("text_bytes=%d digest=%08x", text_bytes, digest))
print(string.format("words distinct=%d total=%d longest=%s", distinct, total, longest))
print(string.format("live ids sum=%d", ids))
