//! The one Lua script every round trip of [`RedisStore`](crate::RedisStore) runs.
//!
//! One script (called by EVALSHA) rather than one per operation, so that everything a
//! worker has to tell the fleet (pushes, acknowledgements, lease renewals, budget
//! feedback) travels with the one thing it needs back (a lease, or the fleet's state) in a
//! single round trip, and is applied atomically: the acknowledgement of a page and the
//! requests found on it land together or not at all.
//!
//! Arguments (all `ARGV`; key names are built from the job prefix, which carries a `{job}`
//! hash tag so every key of a job lives in one slot):
//!
//! ```text
//! prefix, worker, lease_timeout_ms, stats_json ("" = none)
//! n_push,  (host, fingerprint16 | "", member) * n_push
//! n_ack,   lease_id * n_ack
//! n_renew, lease_id * n_renew
//! n_fb,    (host, skip_reason | "", sent, status, latency_ms, timeout, retry_after_ms,
//!           rl_remaining, rl_reset_ms, soft, crawl_delay_ms, PARAMS) * n_fb
//! lease_host | "", drain, budget, PARAMS
//! sync
//! PARAMS = start_rate, min_rate, max_rate, burst, min_gap_ms, margin_ms, pause_ms,
//!          resume, tolerance_ms
//! ```
//!
//! Reply: `{dups, reclaimed, lease, feedback_views, sync}`, where `lease` is
//! `{code, id, member, left, ready_in_ms, rate, holds, held_ms}` (code 1 granted, 0 queue
//! empty, 2 refused by the budget, 3 host skipped by the fleet, -1 not asked),
//! `feedback_views` is `{host, ready_in_ms, rate, holds, held_ms}*` and `sync` is
//! `{leased, host, len, skipped, ...}` or empty.
//!
//! Times are the Redis server's clock (`TIME`), so workers on different machines share
//! one clock; replies carry durations ("ready in"), never instants.

/// The script. Key layout under `prefix` (`crawler:{JOB}:`):
///
/// - `seen`: SET of 16-byte binary fingerprints.
/// - `hosts`: SET of hosts that may have queued work.
/// - `q:HOST`: ZSET, all scores 0, so members sort by their bytes: flipped priority (4),
///   seq (8), worker (4), request JSON. `ZPOPMIN` is "best first".
/// - `leases`: ZSET lease id -> expiry (ms); `lease`: HASH lease id -> `HOST \n member`.
/// - `lease_seq`: lease id counter.
/// - `b:HOST`: HASH, the host's shared budget: `tat` (GCRA theoretical arrival time),
///   `rate`, `ceil` (learned ceiling, -1 = none), `hold`, `holds`, `held`, `lcut` (last
///   cut), `steered`, `lf`/`ls` (latency averages), `cd` (Crawl-delay), `safe`, `probe`,
///   `skip`, and `r:WORKER` (the send slot booked for one worker).
/// - `stats`: HASH worker -> that worker's stats JSON; `meta`: HASH of fleet counters.
pub(crate) const STEP: &str = r#"
local P = ARGV[1]
local wid = ARGV[2]
local timeout = tonumber(ARGV[3])
local stats = ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local i = 5
local function nxt() local v = ARGV[i]; i = i + 1; return v end
local function num() return tonumber(nxt()) end
local function params()
  return { start = num(), min = num(), max = num(), burst = num(), gap = num(),
           margin = num(), pause = num(), resume = num(), tol = num() }
end

local function load(host)
  local key = P .. 'b:' .. host
  local f = redis.call('HMGET', key, 'tat', 'rate', 'ceil', 'hold', 'holds', 'held', 'lcut',
    'steered', 'lf', 'ls', 'cd', 'safe', 'probe', 'skip', 'r:' .. wid)
  return key, { tat = tonumber(f[1]) or 0, rate = tonumber(f[2]), ceil = tonumber(f[3]) or -1,
    hold = tonumber(f[4]) or 0, holds = tonumber(f[5]) or 0, held = tonumber(f[6]) or 0,
    lcut = tonumber(f[7]) or -1, steered = tonumber(f[8]) or 0, lf = tonumber(f[9]) or -1,
    ls = tonumber(f[10]) or -1, cd = tonumber(f[11]) or 0, safe = tonumber(f[12]) or -1,
    probe = tonumber(f[13]) or 60000, skip = f[14], mine = tonumber(f[15]) }
end
local function save(key, b)
  redis.call('HSET', key, 'tat', b.tat, 'rate', b.rate, 'ceil', b.ceil, 'hold', b.hold,
    'holds', b.holds, 'held', b.held, 'lcut', b.lcut, 'steered', b.steered, 'lf', b.lf,
    'ls', b.ls, 'cd', b.cd, 'safe', b.safe, 'probe', b.probe)
end
local function top(b, p)
  local c = p.max
  if b.ceil >= 0 then c = math.min(c, math.max(b.ceil, p.min)) end
  return c
end
local function set_rate(b, p, r)
  b.rate = math.max(p.min, math.min(r, top(b, p)))
end
local function init(b, p)
  if not b.rate then b.rate = p.start end
  set_rate(b, p, b.rate)
end
local function interval(b, p)
  return math.max(1000 / b.rate, b.cd, p.gap)
end
-- The earliest send the bucket allows now (not booking it).
local function earliest(b, p)
  local iv = interval(b, p)
  return math.max(now, b.tat - (p.burst - 1) * iv, b.hold)
end
-- Book the next send: the GCRA step, moved past any hold.
local function book(b, p)
  local s = earliest(b, p)
  b.tat = math.max(b.tat, s) + interval(b, p)
  return s
end
local function hold(b, p, wait)
  local margin = math.min(p.margin, wait / 50 + 5)
  local untl = now + wait + margin
  if untl > b.hold then
    b.holds = b.holds + 1
    b.held = b.held + untl - math.max(b.hold, now)
    b.hold = untl
  end
end
local function cut(b, p, sent_at, factor)
  if b.lcut >= 0 and sent_at < b.lcut then return end
  if factor == 0.5 then
    if b.safe >= 0 and b.rate <= b.safe * 1.1 * 1.05 then
      b.ceil = b.safe; b.probe = b.probe * 2; b.lcut = now
      set_rate(b, p, b.safe * 0.95)
      return
    end
    if b.ceil >= 0 and b.rate >= 0.98 * b.ceil then
      b.ceil = b.ceil * 0.9; b.lcut = now
      set_rate(b, p, b.ceil)
      return
    end
    local c = b.rate * 0.5 * 0.95
    if b.ceil < 0 or c < b.ceil then b.ceil = c end
  end
  b.lcut = now
  set_rate(b, p, b.rate * factor)
end
local function view(host, b, p)
  return { host, math.ceil(earliest(b, p) - now), tostring(b.rate), b.holds, math.floor(b.held) }
end

-- 1. Pushes: the fingerprint goes into the seen set in the same step as the request into
--    its queue; a fingerprint another worker recorded first makes the push a duplicate.
local dups = 0
for _ = 1, num() do
  local host, fp, member = nxt(), nxt(), nxt()
  if fp == '' or redis.call('SADD', P .. 'seen', fp) == 1 then
    redis.call('ZADD', P .. 'q:' .. host, 0, member)
    redis.call('SADD', P .. 'hosts', host)
  else
    dups = dups + 1
  end
end

-- 2. Acknowledgements (after the pushes: a page's links land before its lease goes).
for _ = 1, num() do
  local id = nxt()
  redis.call('ZREM', P .. 'leases', id)
  redis.call('HDEL', P .. 'lease', id)
end

-- 3. Renewals of leases still being worked on.
for _ = 1, num() do
  redis.call('ZADD', P .. 'leases', 'XX', now + timeout, nxt())
end

-- 4. Budget feedback.
local views = {}
for _ = 1, num() do
  local host, skip = nxt(), nxt()
  local sent, status, latency, tmo, ra = num(), num(), num(), num(), num()
  local rl_rem, rl_reset, soft, cdelay = num(), num(), num(), num()
  local p = params()
  local key, b = load(host)
  init(b, p)
  if cdelay > b.cd then b.cd = cdelay end
  if skip ~= '' then redis.call('HSET', key, 'skip', skip) end
  if sent == 1 and skip == '' then
    if ra >= 0 then
      hold(b, p, ra)
      b.probe = math.max(b.probe, ra * 10)
    end
    if rl_reset >= 0 and rl_rem == 0 then hold(b, p, rl_reset) end
    if soft == 1 then hold(b, p, p.pause) end
    local sent_at = now - latency
    if soft == 1 then
      if b.lcut < 0 or sent_at >= b.lcut then
        local c = b.rate * p.resume
        if b.ceil < 0 or c < b.ceil then b.ceil = c end
        b.lcut = now
        set_rate(b, p, b.rate * p.resume)
      end
    elseif status == 429 or status == 503 or tmo == 1 then
      cut(b, p, sent_at, 0.5)
    elseif rl_reset >= 0 then
      b.steered = 1
      local secs = rl_reset / 1000
      -- Whole-second resets are rounded up by servers: half a second less on average.
      if rl_reset % 1000 == 0 and secs >= 1 then secs = secs - 0.5 end
      if rl_rem > 0 and secs > 0 then
        b.ceil = -1
        set_rate(b, p, math.max(rl_rem / secs, p.min))
      end
    elseif status > 0 then
      local lat = latency / 1000
      if b.lf < 0 then b.lf = lat else b.lf = 0.7 * b.lf + 0.3 * lat end
      if b.ls < 0 then b.ls = lat else b.ls = 0.95 * b.ls + 0.05 * lat end
      if b.lf > 2 * b.ls and (b.lf - b.ls) * 1000 > p.tol then
        local spacing = math.max(b.lf, 1) * 1000
        if b.lcut < 0 or now - spacing >= b.lcut then cut(b, p, sent_at, 0.85) end
      elseif b.steered == 0 then
        if b.ceil >= 0 and (b.lcut < 0 or now - b.probe >= b.lcut) then
          b.safe = b.rate; b.ceil = b.rate * 1.1; b.lcut = now
        end
        set_rate(b, p, b.rate + 0.25 / b.rate)
      end
    end
  end
  save(key, b)
  views[#views + 1] = view(host, b, p)
end

-- 5. Leases of dead workers: back to their queues (after this worker's own renewals).
local reclaimed = 0
local expired = redis.call('ZRANGEBYSCORE', P .. 'leases', '-inf', now, 'LIMIT', 0, 256)
for _, id in ipairs(expired) do
  local rec = redis.call('HGET', P .. 'lease', id)
  if rec then
    local cut_at = string.find(rec, '\n', 1, true)
    local host = string.sub(rec, 1, cut_at - 1)
    redis.call('ZADD', P .. 'q:' .. host, 0, string.sub(rec, cut_at + 1))
    redis.call('SADD', P .. 'hosts', host)
    reclaimed = reclaimed + 1
  end
  redis.call('ZREM', P .. 'leases', id)
  redis.call('HDEL', P .. 'lease', id)
end
if reclaimed > 0 then redis.call('HINCRBY', P .. 'meta', 'reclaimed', reclaimed) end

-- 6. A lease, with the budget checked and the token taken in the same step.
local lease = { -1 }
local lhost, drain, budget = nxt(), num(), num()
local lp = params()
if lhost ~= '' then
  local qkey = P .. 'q:' .. lhost
  local key, b = nil, nil
  local granted = true
  if budget == 1 then
    key, b = load(lhost)
    init(b, lp)
    if b.skip and drain == 0 then
      lease = { 3, 0, '', redis.call('ZCARD', qkey), 3600000, tostring(b.rate), b.holds, math.floor(b.held) }
      granted = false
    elseif drain == 0 then
      local iv = interval(b, lp)
      local mine = b.mine
      -- A booked slot is used on time (2 ms early to half an interval late); one made
      -- stale by a hold or by lateness gives way to a fresh booking.
      if mine and mine >= b.hold and now >= mine - 2 and now <= mine + iv / 2 then
        redis.call('HDEL', key, 'r:' .. wid)
      elseif mine and mine >= b.hold and mine > now then
        lease = { 2, 0, '', redis.call('ZCARD', qkey), math.ceil(mine - now), tostring(b.rate), b.holds, math.floor(b.held) }
        granted = false
      else
        local s = book(b, lp)
        if s > now + 2 then
          redis.call('HSET', key, 'r:' .. wid, s)
          save(key, b)
          lease = { 2, 0, '', redis.call('ZCARD', qkey), math.ceil(s - now), tostring(b.rate), b.holds, math.floor(b.held) }
          granted = false
        else
          redis.call('HDEL', key, 'r:' .. wid)
        end
      end
    end
  end
  if granted then
    local popped = redis.call('ZPOPMIN', qkey)
    if #popped == 0 then
      redis.call('SREM', P .. 'hosts', lhost)
      lease = { 0, 0, '', 0, 0, '0', 0, 0 }
      if b then lease[6] = tostring(b.rate) end
    else
      local member = popped[1]
      local id = redis.call('INCR', P .. 'lease_seq')
      redis.call('ZADD', P .. 'leases', now + timeout, id)
      redis.call('HSET', P .. 'lease', id, lhost .. '\n' .. member)
      local left = redis.call('ZCARD', qkey)
      if left == 0 then redis.call('SREM', P .. 'hosts', lhost) end
      local ready_in = 0
      local rate, holds, held = '0', 0, 0
      if b then
        if drain == 0 and left > 0 then
          -- Book this worker's next slot now, so that it comes back on time instead of
          -- racing the other workers for the next token.
          local s = book(b, lp)
          redis.call('HSET', key, 'r:' .. wid, s)
          ready_in = math.ceil(s - now)
        else
          ready_in = math.ceil(earliest(b, lp) - now)
        end
        save(key, b)
        rate, holds, held = tostring(b.rate), b.holds, math.floor(b.held)
      end
      lease = { 1, id, member, left, ready_in, rate, holds, held }
    end
  end
end

-- 7. The fleet's state, when asked: leases outstanding and every host with work.
local sync = {}
if num() == 1 then
  sync[1] = redis.call('ZCARD', P .. 'leases')
  for _, h in ipairs(redis.call('SMEMBERS', P .. 'hosts')) do
    local n = redis.call('ZCARD', P .. 'q:' .. h)
    if n == 0 then
      redis.call('SREM', P .. 'hosts', h)
    else
      sync[#sync + 1] = h
      sync[#sync + 1] = n
      sync[#sync + 1] = redis.call('HEXISTS', P .. 'b:' .. h, 'skip')
    end
  end
end

if stats ~= '' then redis.call('HSET', P .. 'stats', wid, stats) end
return { dups, reclaimed, lease, views, sync }
"#;
