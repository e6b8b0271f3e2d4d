-- Palisade security events in ClickHouse.
--
-- Works on ClickHouse 18.16 (Debian's) and current releases alike: DateTime (unix seconds),
-- String, UInt*, Nullable, FixedString(16) addresses, ReplacingMergeTree with PARTITION BY /
-- ORDER BY.
--
-- Delivery is effectively exactly once: every row carries its writer (wid: node, service and
-- a random id drawn at start) and its number in that writer (rid), which a retry does not
-- change, at the end of the sorting key of a ReplacingMergeTree. A batch stored twice (a
-- retry after a timeout whose first attempt landed) is merged into one; queries that read
-- with FINAL are exact before the merge. `dnsd ctl events-init` moves tables of the older
-- MergeTree layout to this one.
-- Nothing newer (no LowCardinality, DateTime64, IPv4/IPv6 types, TTL, CODEC, Map).
--
-- Applied by `dnsd ctl events-init` (or before the first insert with
-- [events.clickhouse] init = true) with the configured database and table names; it also
-- runs as is: clickhouse-client --multiquery < shield/sql/events.sql
--
-- Addresses are 16 bytes of IPv6, IPv4 as ::ffff:a.b.c.d: show them with IPv6NumToString(src).
-- Partitions are months; old data goes with ALTER TABLE palisade.events DROP PARTITION 202501.
-- CREATE ... IF NOT EXISTS never changes an existing table.

CREATE DATABASE IF NOT EXISTS palisade;

-- Aggregated events: one row per (flush, service, tenant, action, source prefix). The row
-- with is_other = 1 holds the group's traffic not listed by prefix, so sum(hits) over a
-- group's rows is its exact total (dnsd: one hit per blocked datagram or limited response).
CREATE TABLE IF NOT EXISTS palisade.events
(
    ts          DateTime,          -- flush time, unix seconds (UTC)
    ts_ms       UInt64,            -- flush time, unix milliseconds
    interval_ms UInt64,            -- time the flush covers
    service     String,            -- dnsd or http-front
    node        String,            -- [events] node ('' when unset)
    tenant      UInt32,            -- the zone's or site's tenant ([[zone]]/[[site]] tenant; 0: none or not known yet)
    action      String,            -- blocked, rate_limited, challenged, denied, escalated (a block), suspected (unproven: never a block)
    evidence    String DEFAULT '', -- what proved the source owns its address: udp (nothing), cookie, tcp, http, rules, operator
    reason      UInt16,            -- last reason seen for the prefix: http-front rule code; dnsd 1000 blocked, 1001 RRL, 1002 random subdomain, 1003 cookie
    src         FixedString(16),   -- source prefix, network address (zeros on the is_other row)
    src_len     UInt8,             -- prefix length in IPv6 terms (IPv4 /24 is 120)
    is_other    UInt8,             -- 1: traffic not listed by prefix
    hits        UInt64,            -- events in the interval (for a listed prefix, an upper bound)
    min_hits    UInt64,            -- guaranteed lower bound
    wid         String,            -- the writer: node/service/random id
    rid         UInt64             -- the row's number in its writer
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(ts)
ORDER BY (tenant, action, ts, wid, rid);

-- Sampled access records of passed requests (http-front).
CREATE TABLE IF NOT EXISTS palisade.access
(
    ts             DateTime,          -- arrival, unix seconds (UTC)
    ts_ms          UInt64,            -- arrival, unix milliseconds
    service        String,            -- http-front
    node           String,
    site           String,
    tenant         UInt32,            -- 0 when the site has none
    client         FixedString(16),   -- client address
    method         String,
    url            String,            -- scheme, host, path and query (at most 2048 bytes)
    proto          String,            -- HTTP/1.1 or HTTP/2
    status         UInt16,
    duration_us    UInt64,            -- arrival to response head, monotonic, never negative
    upstream       String,
    action         String,            -- pass or allow
    user_agent     String,            -- '' when not sent (at most 512 bytes)
    referer        String,            -- '' when not sent (at most 512 bytes)
    request_bytes  Nullable(UInt64),  -- Content-Length, when given
    response_bytes Nullable(UInt64),
    wid            String,            -- the writer: node/service/random id
    rid            UInt64             -- the row's number in its writer
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(ts)
ORDER BY (tenant, site, ts, wid, rid);
