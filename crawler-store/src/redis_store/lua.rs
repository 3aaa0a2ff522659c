//! The one Lua script every step of [`RedisStore`](crate::RedisStore) runs, and the join
//! script.
//!
//! One script (called by EVALSHA) rather than one per operation, so that everything a
//! worker has to tell the fleet (pushes, acknowledgements, lease renewals, budget
//! feedback) travels with the one thing it needs back (a lease, or the fleet's state) in a
//! single round trip, and is applied atomically: a host's queue insert lands together with
//! its fingerprint in the seen set, and a lease with the send it books.
//!
//! A call carries one or more *sections*, one per shard it concerns (see `layout`): on a
//! plain Redis one call carries every shard the step touches (one command per step, all of
//! it atomic); on a Redis Cluster each shard gets a call of its own, sent at once with the
//! others, so no script touches keys of two slots. `KEYS[1]` is the first section's prefix,
//! which only routes the call to the master of that shard's slot.
//!
//! Arguments (`ARGV`):
//!
//! ```text
//! worker, lease_timeout_ms, idle_ttl_ms, epoch, token, n_sections,
//! prefix * n_sections,
//! then per section:
//!   confirmed_steps
//!   n_push,  (host, fingerprint16 | "", member) * n_push
//!   n_ack,   lease_id * n_ack
//!   n_renew, lease_id * n_renew
//!   n_cas,   (host, expected_version, state_json, skip_reason | "", merge) * n_cas
//!   n_op,    (host, kind, at, factor) * n_op
//!   lease_host | "", drain, budget, expected_version, "horizon_ms,look_ahead_ms", factor,
//!     "interval,slack,crawl_delay", concurrency, lease_id, extra_lease_id | "",
//!     "site,own_gap_ms,own_max_rate,known_pacer,known_pacer_version" | ""
//!   sync
//!   peek_host | "", peek_expected_version, peek_pacer_expected_version
//! ```
//!
//! Reply: `{now_ms, section*}` with each section
//! `{dups, reclaimed, lease, cas, sync, steps_before, steps, peek, ops}`, or
//! `{"lost", section_number, epoch}` when a section's copy of the job's epoch is not the one
//! the worker joined (nothing at all was applied), where `lease` is
//! `{code, id, member, left, version, state, in_flight, at, pacing[, extra_member | "", pool]}` (code 1 granted, 0
//! queue empty, 2 not yet (the host's next slot is more than `ahead_ms` away on the server's
//! clock, or the host has its fleet-wide concurrency in flight), 3 host skipped by the
//! fleet, -1 not asked; `state` is the learning state only when its version is not the one
//! the worker holds, else empty; `at` the send time booked; `extra_member` the host's next
//! request under `extra_lease_id`, granted with the first when the host is open (no
//! interval, hold or spent quota) and its fleet-wide concurrency has room), `cas` is
//! `{host, committed, version, state, pacing}*` (`state` only when the commit lost), `ops`
//! is `{host, slot, pacing, pool}*` (`pool` empty but for a pooling operation), `pool` is
//! `{pacer, pacer_version, pacer_state, pacer_pacing, pool_concurrency, pool_max_rate,
//! own_booked | names}` (the pacer's state only when the worker's is not the current one;
//! a pooling operation answers the group's names when it formed the pool), `sync` is `{leased, gen, host, len, skipped, ...}` or empty,
//! and `peek` is `{version, state, skipped, pacing[, pacer, pacer_version, pacer_state,
//! pacer_skipped, pacer_pacing]}` (`state` as in a lease; the pacer's part when the host is
//! a pooled name paced by another) or empty.
//!
//! **Two records per host** (in the hash `b:HOST`). The *learning state* (`s`, the
//! machine's [`HostState`](crawler_sched::politeness::HostState) as JSON, about 1 KB, with
//! its version `v`) changes only on outcomes that teach something (refusals, holds, rate
//! changes, and routine answers folded in batches) and only by compare-and-set, computed by
//! the worker that saw the outcome, once. The *pacing record* (a dozen numbers: `t` the next
//! slot, `iv` the interval, `sl` the burst's slack, `cd` the Crawl-delay floor, `hu` the
//! hold's end, the quota `ql`/`qt`/`su`, the booking's `lg`/`ba`/`sg`, a booking count `n`
//! and `fl` in flight; and `dp`, the latest departure a worker reported, which only dates
//! the send gap, and `df`, the departure floor a slot given back never goes under, neither
//! returned) is what a lease needs, and the script books a send in it itself:
//! slot = max(next slot less the slack, hold, spent quota, now + look-ahead), next slot =
//! max(next slot, slot) + interval. So a lease never loses a race: leases of several workers
//! on one host take consecutive slots, and none touches the learning state's version. A
//! learning commit rewrites the pacing fields the machine derives from what it learned (the
//! interval, slack and floor; the hold and the next slot only forward; the quota when the
//! worker read a new one, less the bookings since), in the same script. The one move back,
//! a slot given back by a request that was not sent, is a pacing operation of its own
//! (step 4b), applied only while that request's booking is still the last.
//!
//! **Pooled groups.** The names of one site (registrable domain, see `layout`) share a
//! shard. A lease with a `site` adds its host to the site's members (`gm:SITE`, a set), its
//! own in-flight cap and `max_rate` kept in its hash (`oc`, `or`, and `gs` the site). A
//! pooling operation (step 4b, `p`, asked when a refusal reached the group) makes the
//! asking host the group's pacer (`gp:SITE`) unless it has one, with the pool's caps in
//! its hash (`pc` the sum of the members' caps, `pr` of their `max_rate`s, `pf` the pool's
//! requests in flight; a member joining later adds its own). From then on a lease of any
//! member books the pacer's pacing record by the same rule (the pacer's next slot, hold and
//! spent quota), after the member's own hold and one gap of its own `max_rate` after its
//! own last booking (`ob`), under the pool's in-flight cap and its own; `lp` (lease id ->
//! pacer) releases the pool's count with the lease. A pacer skipped by the fleet refuses
//! every member's lease (code 3) and reads as skipped in the fleet's state. The worker runs
//! the pacer's machine under the pool's caps and commits what any member's answer taught to
//! the pacer's learning state, as a local crawl's pacer learns for its group.
//!
//! The politeness decisions are not here: each worker runs the per-host machine of
//! crawler-sched on the state it last read (the learning state with the pacing record laid
//! over it) and commits what it learned, so the fleet and a local crawl share one
//! implementation. This script books the slots by the machine's own rule (the GCRA step of
//! `HostMachine::on_send`), refuses leases while the host is held or its fleet-wide
//! concurrency is in flight, and counts the requests in flight per host across the fleet.
//! `booking_tests` drives the script (on a real Redis) and the machine with the same random
//! leases, answers, give-backs, late rebookings, holds and quotas, and asserts the same
//! slots: the two implementations of the rule cannot drift apart unseen.
//!
//! Times are the Redis server's clock (`TIME`), so workers on different machines share
//! one clock; each reply carries it so workers can keep their estimate of it. (In a
//! cluster each master has its own clock; NTP keeps them within a few ms, and a host's
//! slots are always booked and checked on its own shard's master.)
//!
//! **When Redis forgets.** Every call first checks each section's copy of the job's epoch
//! (written when the job was created, see [`JOIN`]) against the one the worker joined:
//! missing or different means that shard lost the job (a restart without persistence, a
//! failover to an empty replica, eviction, expiry), and the call changes nothing, so a
//! worker never mistakes an empty Redis for a finished crawl nor writes into another job.
//! Every section also counts itself in the worker's entry of its shard's `steps` (by its
//! token) and returns the count before and after; a count below the one the worker last
//! read means that shard lost some of this worker's confirmed writes (it restarted from an
//! older snapshot, lost an AOF `everysec` tail, or failed over to a replica that was
//! behind). Lease ids are `TOKEN:N` with a random 64-bit token per worker run, so they never
//! repeat, whatever Redis forgets, and a stale acknowledgement cannot delete another
//! worker's lease.

/// The step script (key layout: see `layout`), with the machine's own constants written in:
/// `SEND_GAP_WEIGHT` is [`crawler_sched::politeness::SEND_GAP_WEIGHT`], so the fleet and the
/// machine weigh a send gap alike.
pub(crate) static STEP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    STEP_TEXT.replacen(
        "SEND_GAP_WEIGHT",
        &format!("{:?}", crawler_sched::politeness::SEND_GAP_WEIGHT),
        1,
    )
});

/// The step script's text. Every key a section touches gets `idle_ttl_ms` to live, so a
/// job nobody works on any more leaves nothing behind in Redis.
const STEP_TEXT: &str = r#"
local SGW = SEND_GAP_WEIGHT
local wid = ARGV[1]
local timeout = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local epoch, token = ARGV[4], ARGV[5]
local nsec = tonumber(ARGV[6])
-- 0. The job this worker joined, in every shard of the call, or nothing at all: a shard
--    that forgot the job must not be read as "nothing queued", nor be written into.
for s = 1, nsec do
  local e = redis.call('GET', ARGV[6 + s] .. 'epoch')
  if e ~= epoch then return { 'lost', s, e or '' } end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local i = 7 + nsec
local function nxt() local v = ARGV[i]; i = i + 1; return v end
local function num() return tonumber(nxt()) end
local function touch(key) if ttl > 0 then redis.call('PEXPIRE', key, ttl) end end
-- The pacing record's fields, in the order `penc` writes them (absent optional ones as ''),
-- then `dp`, the latest departure the workers reported, kept for the send gap only, and
-- `df`, the departure floor (one gap after the latest late departure), for give-backs.
local PF = { 't', 'iv', 'sl', 'cd', 'hu', 'su', 'ql', 'qt', 'lg', 'ba', 'sg', 'n', 'fl', 'dp', 'df' }
local function pread(bkey)
  local r = redis.call('HMGET', bkey, unpack(PF))
  local p = {}
  for k, f in ipairs(PF) do p[f] = tonumber(r[k]) end
  return p
end
-- Milliseconds to the microsecond; the optional fields absent stay empty.
local function fmt(x) if x == nil then return '' end return string.format('%.3f', x) end
local function penc(p)
  local o = {}
  for k, f in ipairs(PF) do if f ~= 'dp' and f ~= 'df' then o[k] = fmt(p[f]) end end
  return table.concat(o, ',')
end
local function pwrite(bkey, p)
  local set, del = {}, {}
  for _, f in ipairs(PF) do
    if f ~= 'fl' then
      if p[f] == nil then del[#del + 1] = f else set[#set + 1] = f; set[#set + 1] = fmt(p[f]) end
    end
  end
  if #set > 0 then redis.call('HSET', bkey, unpack(set)) end
  if #del > 0 then redis.call('HDEL', bkey, unpack(del)) end
end
-- The gap one send books: the interval, times the worker's draw in fixed mode with
-- randomised delays (never under the Crawl-delay then), as `HostMachine::on_send`.
local function gap_of(p, factor)
  local iv = p.iv or 0
  local g = iv * factor
  if factor ~= 1 and g < (p.cd or 0) then g = p.cd or 0 end
  return g
end
-- `HostMachine::on_send(at)` on a pacing record: the pace actually kept, the quota spent,
-- the slot. From the latest booking, or the latest departure when a send left after its
-- booking (late): the gap the server saw.
local function book(p, at, factor)
  local last = p.ba
  if last and p.dp and p.dp > last then last = p.dp end
  if last and last >= (p.hu or 0) then
    local g = math.max(at - last, 0)
    if (p.sg or 0) > 0 then p.sg = (1 - SGW) * p.sg + SGW * g else p.sg = g end
  end
  p.ba = at
  if p.ql then
    p.ql = p.ql - 1
    if p.ql <= 0 and p.su == nil then p.su = p.qt end
  end
  local g = gap_of(p, factor)
  p.lg = g
  p.t = math.max(p.t or at, at) + g
  p.n = (p.n or 0) + 1
end
local function csv(text)
  local o = {}
  for x in string.gmatch(text .. ',', '([^,]*),') do o[#o + 1] = x end
  return o
end

local out = { tostring(now) }
for s = 1, nsec do
  local P = ARGV[6 + s]
  local changed = false
  local confirmed = num()
  local had = tonumber(redis.call('HGET', P .. 'steps', token) or '0')
  -- A retried step may have applied already: count on from the larger.
  local steps = math.max(had, confirmed) + 1
  redis.call('HSET', P .. 'steps', token, steps)
  -- A lease ends (acknowledged or reclaimed): one fewer in flight for its host.
  local function release(rec, id)
    local cut_at = string.find(rec, '\n', 1, true)
    local host = string.sub(rec, 1, cut_at - 1)
    local bkey = P .. 'b:' .. host
    if tonumber(redis.call('HGET', bkey, 'fl') or '0') > 0 then
      redis.call('HINCRBY', bkey, 'fl', -1)
    end
    -- Booked on a pooled group's pacer: one fewer in flight for the pool too.
    local pl = redis.call('HGET', P .. 'lp', id)
    if pl then
      local pk = P .. 'b:' .. pl
      if tonumber(redis.call('HGET', pk, 'pf') or '0') > 0 then redis.call('HINCRBY', pk, 'pf', -1) end
      redis.call('HDEL', P .. 'lp', id)
    end
    return host, string.sub(rec, cut_at + 1)
  end

  -- 1. Pushes: the fingerprint goes into the seen set in the same step as the request into
  --    its queue; a fingerprint another worker recorded first makes the push a duplicate.
  local dups = 0
  for _ = 1, num() do
    local host, fp, member = nxt(), nxt(), nxt()
    if fp == '' or redis.call('SADD', P .. 'seen', fp) == 1 then
      redis.call('ZADD', P .. 'q:' .. host, 0, member)
      touch(P .. 'q:' .. host)
      redis.call('SADD', P .. 'hosts', host)
      changed = true
    else
      dups = dups + 1
    end
  end

  -- 2. Acknowledgements (after the pushes: a page's links land before its lease goes).
  for _ = 1, num() do
    local id = nxt()
    local rec = redis.call('HGET', P .. 'lease', id)
    if rec then release(rec, id); changed = true end
    redis.call('ZREM', P .. 'leases', id)
    redis.call('HDEL', P .. 'lease', id)
  end

  -- 3. Renewals of leases still being worked on.
  for _ = 1, num() do
    redis.call('ZADD', P .. 'leases', 'XX', now + timeout, nxt())
  end

  -- 4. Learning state commits, each a compare-and-set on the state's version, rewriting
  --    the pacing fields the machine derives from what it learned (`merge`:
  --    iv, sl, cd, hu, t, quota_changed, ql, qt, su, bookings_seen, departed_at,
--    departure_floor).
  local cas = {}
  for _ = 1, num() do
    local host, expected, state, skip, merge = nxt(), num(), nxt(), nxt(), csv(nxt())
    local bkey = P .. 'b:' .. host
    local v = tonumber(redis.call('HGET', bkey, 'v') or '0')
    local p = pread(bkey)
    if v == expected then
      redis.call('HSET', bkey, 'v', v + 1, 's', state)
      if skip ~= '' then redis.call('HSET', bkey, 'skip', skip) end
      if merge[1] ~= '' then p.iv, p.sl, p.cd = tonumber(merge[1]), tonumber(merge[2]), tonumber(merge[3]) end
      -- Holds and slots only move forward here: bookings made since the worker read the
      -- record are in it, not in the worker's state.
      local hu, tat = tonumber(merge[4]), tonumber(merge[5])
      if hu and (p.hu == nil or hu > p.hu) then p.hu = hu end
      if tat and (p.t == nil or tat > p.t) then p.t = tat end
      local dp = tonumber(merge[11])
      if dp and (p.dp == nil or dp > p.dp) then p.dp = dp end
      local df = tonumber(merge[12])
      if df and (p.df == nil or df > p.df) then p.df = df end
      if merge[6] == '1' then
        local ql = tonumber(merge[7])
        -- The worker counted the requests booked when it read; those booked since spend
        -- the new reading too.
        if ql then ql = ql - ((p.n or 0) - (tonumber(merge[10]) or 0)) end
        p.ql, p.qt, p.su = ql, tonumber(merge[8]), tonumber(merge[9])
        if p.ql and p.ql <= 0 and p.su == nil then p.su = p.qt end
      end
      pwrite(bkey, p)
      touch(bkey)
      cas[#cas + 1] = { host, 1, v + 1, '', penc(p) }
    else
      cas[#cas + 1] = { host, 0, v, redis.call('HGET', bkey, 's') or '', penc(p) }
    end
  end

  -- 4b. Pacing operations that need no compare-and-set: a held request that missed its
  --     slot books a new one (`b`), a request that was not sent gives its slot back (`g`).
  --     (A late departure moves the next slot forward through its commit, step 4.)
  local ops = {}
  for _ = 1, num() do
    local host, kind, at, factor = nxt(), nxt(), num(), num()
    local bkey = P .. 'b:' .. host
    local p = pread(bkey)
    local slot = 0
    local info = {}
    if kind == 'p' then
      -- A refusal reached the host's limiter group: from now on its pacing record paces
      -- the group's live names (those that leased, see step 6) as one, with the sums of
      -- their caps, unless the group is pooled already (then it stays on its pacer).
      local site = redis.call('HGET', bkey, 'gs')
      if site then
        local gp = P .. 'gp:' .. site
        local pacer = redis.call('GET', gp)
        local members = redis.call('SMEMBERS', P .. 'gm:' .. site)
        local formed = false
        if not pacer and #members >= 2 then
          pacer = host
          formed = true
          redis.call('SET', gp, host)
          local c, r = 0, 0
          for _, m in ipairs(members) do
            local x = redis.call('HMGET', P .. 'b:' .. m, 'oc', 'or')
            c = c + (tonumber(x[1]) or 1)
            r = r + (tonumber(x[2]) or 0)
          end
          redis.call('HSET', bkey, 'pc', c, 'pr', fmt(r), 'pf', 0)
          touch(gp)
        end
        if pacer then
          local pk = P .. 'b:' .. pacer
          local x = redis.call('HMGET', pk, 'pc', 'pr', 'v')
          info = { pacer, tonumber(x[3] or '0'), redis.call('HGET', pk, 's') or '', penc(pread(pk)),
            x[1] or '', x[2] or '', formed and table.concat(members, ',') or '' }
        end
      end
    elseif kind == 'g' then
      -- A slot given back (`HostMachine::give_back`): the request booked last was not sent.
      -- Only while its booking is still the last thing that moved the next slot (`at`, the
      -- slot its lease left next, to the record's precision): a slot booked or moved since
      -- is another request's.
      -- Never before the departure floor: one gap after the latest late departure.
      if p.t and math.abs(p.t - at) < 0.01 then
        p.t = math.min(p.t, math.max(p.t - (p.lg or 0), now, p.df or now))
        p.lg = 0
      end
    else
      slot = math.max(p.t or at, at, p.hu or at, p.su or at)
      local g = gap_of(p, factor)
      p.lg = g
      p.t = slot + g
    end
    pwrite(bkey, p)
    touch(bkey)
    ops[#ops + 1] = { host, fmt(slot), penc(p), info }
  end

  -- 5. Leases of dead workers: back to their queues (after this worker's own renewals).
  local reclaimed = 0
  local expired = redis.call('ZRANGEBYSCORE', P .. 'leases', '-inf', now, 'LIMIT', 0, 256)
  for _, id in ipairs(expired) do
    local rec = redis.call('HGET', P .. 'lease', id)
    if rec then
      local host, member = release(rec, id)
      redis.call('ZADD', P .. 'q:' .. host, 0, member)
      redis.call('SADD', P .. 'hosts', host)
      reclaimed = reclaimed + 1
    end
    redis.call('ZREM', P .. 'leases', id)
    redis.call('HDEL', P .. 'lease', id)
    changed = true
  end
  if reclaimed > 0 then redis.call('HINCRBY', P .. 'meta', 'reclaimed', reclaimed) end

  -- 6. A lease, with the send it books in the host's pacing record (see the module docs).
  local lease = { -1 }
  local lhost, drain, budget = nxt(), num(), num()
  local expected, reach, factor, init, conc, lid, xid = num(), csv(nxt()), num(), csv(nxt()), num(), nxt(), nxt()
  -- The host's limiter group, when it has one (`site,own_gap,own_max_rate,known_pacer,
  -- known_version`): see "Pooled groups" in the module docs.
  local pool = csv(nxt())
  -- How far off the next slot may be for a lease, and the least time ahead a send is
  -- booked (the look-ahead: the worker holds the request and sends it on its own timer).
  local ahead, look = tonumber(reach[1]) or 0, tonumber(reach[2]) or 0
  if lhost ~= '' then
    local qkey = P .. 'q:' .. lhost
    local bkey = P .. 'b:' .. lhost
    local cur = redis.call('HMGET', bkey, 'v', 'skip')
    local v = tonumber(cur[1] or '0')
    local p = pread(bkey)
    local fl = p.fl or 0
    -- The learning state only when the worker's is not the current one.
    local function learned() if v ~= expected then return redis.call('HGET', bkey, 's') or '' end return '' end
    local granted = true
    local at = now
    -- The host's limiter group (its registrable domain): a name joins the group's members
    -- at its first lease, with its own caps (a pooled group's caps grow by them); once a
    -- refusal pooled the group (step 4b, `p`), its pacer's record books the group's sends.
    local site = pool[1] or ''
    local pacer, pkey, pr, pv, pc, pf, pskip, ob = nil, nil, nil, 0, 0, 0, nil, nil
    if site ~= '' and budget == 1 and drain == 0 then
      local own_rate = tonumber(pool[3]) or 0
      local gm, gp = P .. 'gm:' .. site, P .. 'gp:' .. site
      if redis.call('SADD', gm, lhost) == 1 then
        redis.call('HSET', bkey, 'gs', site, 'oc', conc, 'or', fmt(own_rate))
        local was = redis.call('GET', gp)
        if was then
          redis.call('HINCRBY', P .. 'b:' .. was, 'pc', conc)
          redis.call('HINCRBYFLOAT', P .. 'b:' .. was, 'pr', fmt(own_rate))
        end
      end
      touch(gm)
      pacer = redis.call('GET', gp) or nil
      if pacer then
        pkey = P .. 'b:' .. pacer
        if pacer == lhost then pr = p else pr = pread(pkey) end
        local x = redis.call('HMGET', pkey, 'pc', 'pf', 'skip', 'v')
        pc, pf, pskip, pv = tonumber(x[1]) or conc, tonumber(x[2]) or 0, x[3], tonumber(x[4] or '0')
        ob = tonumber(redis.call('HGET', bkey, 'ob') or '')
        touch(gp)
      end
    end
    -- A retried step whose first run granted this very lease: the same request again (a
    -- second one under the same id would overwrite the first, losing it).
    local prior = redis.call('HGET', P .. 'lease', lid)
    if prior then
      local cut_at = string.find(prior, '\n', 1, true)
      lease = { 1, lid, string.sub(prior, cut_at + 1), redis.call('ZCARD', qkey), v, learned(), fl, fmt((pacer and ob) or p.ba or now), penc(p) }
      local xprior = xid ~= '' and redis.call('HGET', P .. 'lease', xid)
      if xprior then
        local x_at = string.find(xprior, '\n', 1, true)
        lease[10] = string.sub(xprior, x_at + 1)
      end
      granted = false
    elseif budget == 1 and drain == 0 then
      if p.iv == nil then
        -- The host's first lease: its pacing from the worker's fresh machine.
        p.iv, p.sl, p.cd = tonumber(init[1]) or 0, tonumber(init[2]) or 0, tonumber(init[3]) or 0
      end
      local ready = math.max((p.t or now) - (p.sl or 0), p.hu or now, p.su or now)
      local cap_full = fl >= conc
      if pacer then
        -- A pooled name: the pool's slot (its pacer's next slot, hold and spent quota),
        -- the name's own hold, and one gap of its own `max_rate` after its own last
        -- booking; the pool's in-flight cap and the name's own.
        local own_gap = tonumber(pool[2]) or 0
        ready = math.max((pr.t or now) - (pr.sl or 0), pr.hu or now, pr.su or now, p.hu or now,
          ob and (ob + own_gap) or now)
        cap_full = cap_full or pf >= pc
      end
      if cur[2] or pskip then
        lease = { 3, 0, '', redis.call('ZCARD', qkey), v, learned(), fl, '', penc(p) }
        granted = false
      -- A lease may come up to `ahead` ms before its slot: the worker holds the request
      -- and sends it at the slot it booked.
      elseif ready > now + ahead + 2 or cap_full then
        lease = { 2, 0, '', redis.call('ZCARD', qkey), v, learned(), fl, '', penc(p) }
        granted = false
      else
        at = math.max(ready, now + look)
      end
    end
    if granted then
      local popped = redis.call('ZPOPMIN', qkey)
      if #popped == 0 then
        redis.call('SREM', P .. 'hosts', lhost)
        lease = { 0, 0, '', 0, v, learned(), fl, '', penc(p) }
      else
        local member = popped[1]
        local id = lid
        redis.call('ZADD', P .. 'leases', now + timeout, id)
        redis.call('HSET', P .. 'lease', id, lhost .. '\n' .. member)
        redis.call('HINCRBY', bkey, 'fl', 1)
        p.fl = fl + 1
        local left = redis.call('ZCARD', qkey)
        if left == 0 then redis.call('SREM', P .. 'hosts', lhost) end
        if pacer then
          -- A pooled group's slot, booked on its pacer's record; the name keeps its own
          -- `max_rate` gap from its own last booking (`ob`).
          book(pr, at, factor)
          pwrite(pkey, pr)
          redis.call('HSET', bkey, 'ob', fmt(at))
          redis.call('HINCRBY', pkey, 'pf', 1)
          redis.call('HSET', P .. 'lp', id, pacer)
          ob = at
          touch(pkey)
        elseif budget == 1 and drain == 0 then
          book(p, at, factor)
          pwrite(bkey, p)
        end
        -- A second request of an open host (no pace to keep: no interval, no hold, no
        -- spent quota) under `xid`, while its fleet-wide concurrency has room: the worker
        -- keeps it for its next lease of the host, a round trip saved.
        local xmember = nil
        if xid ~= '' and not pacer and left > 0 and p.fl < conc and drain == 0
          and (budget == 0 or ((p.iv or 0) == 0 and (p.hu or 0) <= now and p.su == nil)) then
          local xpopped = redis.call('ZPOPMIN', qkey)
          if #xpopped > 0 then
            xmember = xpopped[1]
            redis.call('ZADD', P .. 'leases', now + timeout, xid)
            redis.call('HSET', P .. 'lease', xid, lhost .. '\n' .. xmember)
            redis.call('HINCRBY', bkey, 'fl', 1)
            p.fl = p.fl + 1
            left = redis.call('ZCARD', qkey)
            if left == 0 then redis.call('SREM', P .. 'hosts', lhost) end
            if budget == 1 then
              p.ba = at
              if p.ql then
                p.ql = p.ql - 1
                if p.ql <= 0 and p.su == nil then p.su = p.qt end
              end
              p.n = (p.n or 0) + 1
              pwrite(bkey, p)
            end
          end
        end
        touch(bkey)
        changed = true
        lease = { 1, id, member, left, v, learned(), p.fl, fmt(at), penc(p) }
        if xmember then lease[10] = xmember end
      end
    end
    -- A pooled name's answer carries its pool: the pacer, its learning state's version
    -- (and the state when the worker's is not the current one), its pacing record, the
    -- pool's caps, and the name's own last booking.
    if pacer and lease[1] ~= -1 then
      local ps = ''
      if pool[4] ~= pacer or tonumber(pool[5]) ~= pv then ps = redis.call('HGET', pkey, 's') or '' end
      local x = redis.call('HMGET', pkey, 'pc', 'pr')
      lease[10] = lease[10] or ''
      lease[11] = { pacer, pv, ps, penc(pread(pkey)), x[1] or '', x[2] or '', fmt(ob) }
    end
  end

  -- The shard's change counter: two reads of every shard that see the same counters saw
  -- one consistent state of the whole fleet (see `fleet`).
  local gen = changed and redis.call('INCR', P .. 'gen') or tonumber(redis.call('GET', P .. 'gen') or '0')

  -- 7. The shard's part of the fleet's state, when asked: leases outstanding and every
  --    host with work.
  local sync = {}
  if num() == 1 then
    sync[1] = redis.call('ZCARD', P .. 'leases')
    sync[2] = gen
    for _, h in ipairs(redis.call('SMEMBERS', P .. 'hosts')) do
      local n = redis.call('ZCARD', P .. 'q:' .. h)
      if n == 0 then
        redis.call('SREM', P .. 'hosts', h)
      else
        sync[#sync + 1] = h
        sync[#sync + 1] = n
        -- Skipped, or in a pooled group whose pacer the fleet gave up: a group-wide skip.
        local sk = redis.call('HEXISTS', P .. 'b:' .. h, 'skip')
        if sk == 0 then
          local gs = redis.call('HGET', P .. 'b:' .. h, 'gs')
          local gp = gs and redis.call('GET', P .. 'gp:' .. gs)
          if gp then sk = redis.call('HEXISTS', P .. 'b:' .. gp, 'skip') end
        end
        sync[#sync + 1] = sk
      end
    end
  end

  -- 8. One host's state, when asked (a worker holding a request leased ahead of its slot
  --    checks that no hold was placed since): the learning state only if it changed.
  --    A pooled name's slots are its pacer's: a hold a refusal placed on the pool since the
  --    lease is on the pacer's records (the names' own come later, one commit each), so the
  --    pacer's are read too.
  local peek = {}
  local phost, pexpected, ppexpected = nxt(), num(), num()
  if phost ~= '' then
    local bkey = P .. 'b:' .. phost
    local cur = redis.call('HMGET', bkey, 'v', 'skip', 'gs')
    local v = tonumber(cur[1] or '0')
    local s = ''
    if v ~= pexpected then s = redis.call('HGET', bkey, 's') or '' end
    peek = { v, s, cur[2] and 1 or 0, penc(pread(bkey)) }
    local pacer = cur[3] and redis.call('GET', P .. 'gp:' .. cur[3])
    if pacer and pacer ~= phost then
      local pk = P .. 'b:' .. pacer
      local pcur = redis.call('HMGET', pk, 'v', 'skip')
      local pv = tonumber(pcur[1] or '0')
      local ps = ''
      if pv ~= ppexpected then ps = redis.call('HGET', pk, 's') or '' end
      peek[5], peek[6], peek[7], peek[8], peek[9] = pacer, pv, ps, pcur[2] and 1 or 0, penc(pread(pk))
    end
  end

  for _, k in ipairs({ 'seen', 'hosts', 'leases', 'lease', 'lp', 'meta', 'epoch', 'steps', 'gen' }) do
    touch(P .. k)
  end
  out[#out + 1] = { dups, reclaimed, lease, cas, sync, had, steps, peek, ops }
end
return out
"#;

/// Joining a job, on its global slot: create its epoch if the job is new (`SET NX`: the
/// first worker to come creates it, every other joins it), record the shard count of a new
/// job, and take a worker number.
///
/// Arguments: global prefix, a fresh random epoch, idle_ttl_ms, shards of a new job.
/// Reply: `{epoch, worker, created, shards, ready, sites}` (`sites` 1: a host's shard is its
/// site's, see `layout`; 0 for a job created before). The worker that created the job then
/// writes the epoch into every shard and sets `ready`; the others wait for `ready`.
pub(crate) const JOIN: &str = r#"
local P = ARGV[1]
local ttl = tonumber(ARGV[3])
local created = redis.call('SET', P .. 'epoch', ARGV[2], 'NX')
local epoch = redis.call('GET', P .. 'epoch')
if created then
  redis.call('DEL', P .. 'ready')
  redis.call('HSET', P .. 'meta', 'shards', ARGV[4], 'sites', 1)
end
local shards = redis.call('HGET', P .. 'meta', 'shards') or ARGV[4]
local sites = redis.call('HGET', P .. 'meta', 'sites') or '0'
local worker = redis.call('HINCRBY', P .. 'meta', 'workers', 1)
if ttl > 0 then
  for _, k in ipairs({ 'epoch', 'meta' }) do redis.call('PEXPIRE', P .. k, ttl) end
end
return { epoch, worker, created and 1 or 0, tonumber(shards), redis.call('EXISTS', P .. 'ready'), tonumber(sites) }
"#;

#[cfg(test)]
mod tests {
    /// The machine's constant is written into the script, once, as a Lua number.
    #[test]
    fn the_step_script_weighs_a_send_gap_as_the_machine_does() {
        let script = super::STEP.as_str();
        assert!(!script.contains("SEND_GAP_WEIGHT"), "placeholder left");
        let expected = format!(
            "local SGW = {:?}\n",
            crawler_sched::politeness::SEND_GAP_WEIGHT
        );
        assert!(script.contains(&expected), "no {expected:?}");
    }
}
