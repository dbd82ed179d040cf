-- ifsynth warehouse, schema version 1. Statements are idempotent; `store.py` runs them on every open.
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);

CREATE TABLE IF NOT EXISTS runs (
    run_id       VARCHAR PRIMARY KEY,
    name         VARCHAR NOT NULL,
    recipe       VARCHAR NOT NULL,
    fingerprint  VARCHAR NOT NULL,
    config       JSON NOT NULL,
    code_version VARCHAR NOT NULL,
    status       VARCHAR NOT NULL,
    started_at   TIMESTAMP NOT NULL,
    ended_at     TIMESTAMP,
    error        VARCHAR
);

-- Items, verdicts and calls have no primary key: DuckDB holds a key's index whole in memory while a run writes
-- into it, and their keys are hashes, so every write touches all of it. `store.py` keeps them unique: an item or
-- verdict replaces the row of its key (`digests.py`), a call is added once.
CREATE TABLE IF NOT EXISTS items (
    run_id     VARCHAR NOT NULL,
    item_id    VARCHAR NOT NULL,
    stage      VARCHAR NOT NULL,
    kind       VARCHAR NOT NULL,
    group_id   VARCHAR NOT NULL,
    parent_ids VARCHAR[] NOT NULL,
    payload    JSON,
    status     VARCHAR NOT NULL,
    call_keys  VARCHAR[] NOT NULL,
    ord        INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS verdicts (
    run_id     VARCHAR NOT NULL,
    item_id    VARCHAR NOT NULL,
    stage      VARCHAR NOT NULL,
    judge      VARCHAR NOT NULL,
    decision   VARCHAR NOT NULL,
    score      DOUBLE,
    threshold  DOUBLE,
    reason     VARCHAR NOT NULL,
    call_key   VARCHAR,
    created_at TIMESTAMP NOT NULL
);

-- Every attempt at every request; the cache is the successful rows, looked up by `key`.
CREATE TABLE IF NOT EXISTS llm_calls (
    call_id           VARCHAR NOT NULL,
    key               VARCHAR NOT NULL,
    run_id            VARCHAR NOT NULL,
    stage             VARCHAR NOT NULL,
    template          VARCHAR NOT NULL,
    template_hash     VARCHAR NOT NULL,
    base_url          VARCHAR NOT NULL,
    model             VARCHAR NOT NULL,
    request           JSON NOT NULL,
    response          VARCHAR,
    finish_reason     VARCHAR,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    latency_ms        DOUBLE,
    cost              DOUBLE,
    http_status       INTEGER,
    error             VARCHAR,
    attempt           INTEGER NOT NULL,
    created_at        TIMESTAMP NOT NULL
);
-- No index on `key`: a cache lookup joins the keys it wants and scans, and DuckDB keeps an index whole in
-- memory while a run writes (10 MB of 80,000 random keys, most of the table's index memory). An older file's
-- is dropped; `show` finds an item's calls in one scan (7 ms at 80,000 calls, against 2 ms a call with it).
DROP INDEX IF EXISTS llm_calls_key;

CREATE TABLE IF NOT EXISTS stage_counts (
    run_id      VARCHAR NOT NULL,
    stage       VARCHAR NOT NULL,
    ord         INTEGER NOT NULL,
    n_in        INTEGER NOT NULL,
    n_out       INTEGER NOT NULL,
    rejected    INTEGER NOT NULL,
    parse_error INTEGER NOT NULL,
    failed      INTEGER NOT NULL,
    cached      INTEGER NOT NULL,
    sent        INTEGER NOT NULL,
    PRIMARY KEY (run_id, stage)
);

CREATE TABLE IF NOT EXISTS releases (
    name       VARCHAR PRIMARY KEY,
    run_id     VARCHAR,
    recipe     VARCHAR NOT NULL,
    source     VARCHAR NOT NULL,
    card       JSON NOT NULL,
    created_at TIMESTAMP NOT NULL
);

CREATE TABLE IF NOT EXISTS release_docs (
    release VARCHAR NOT NULL,
    doc_id  VARCHAR NOT NULL,
    title   VARCHAR NOT NULL,
    text    VARCHAR NOT NULL,
    meta    JSON NOT NULL,
    PRIMARY KEY (release, doc_id)
);

CREATE TABLE IF NOT EXISTS release_queries (
    release     VARCHAR NOT NULL,
    mode        VARCHAR NOT NULL,
    query_id    VARCHAR NOT NULL,
    group_id    VARCHAR NOT NULL,
    query       VARCHAR NOT NULL,
    instruction VARCHAR NOT NULL,
    meta        JSON NOT NULL,
    PRIMARY KEY (release, mode, query_id)
);

CREATE TABLE IF NOT EXISTS release_qrels (
    release  VARCHAR NOT NULL,
    mode     VARCHAR NOT NULL,
    query_id VARCHAR NOT NULL,
    doc_id   VARCHAR NOT NULL,
    score    INTEGER NOT NULL,
    PRIMARY KEY (release, mode, query_id, doc_id)
);

-- A reranking release's candidate pool (FollowIR's `top_ranked`): the documents a model reorders per query.
CREATE TABLE IF NOT EXISTS release_top_ranked (
    release  VARCHAR NOT NULL,
    mode     VARCHAR NOT NULL,
    query_id VARCHAR NOT NULL,
    doc_id   VARCHAR NOT NULL,
    PRIMARY KEY (release, mode, query_id, doc_id)
);

-- Token log-probabilities of an answer, when the request asked for them (LLM-judge metrics such as INSTFOL).
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS logprobs JSON;

-- A failed attempt: `transient` (retried: timeouts, connection errors, 429, 5xx) or `terminal` (never retried).
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS failure VARCHAR;

-- Batch API jobs: a rerun finds its pending batch here and polls it instead of submitting again.
CREATE TABLE IF NOT EXISTS llm_batches (
    batch_id    VARCHAR PRIMARY KEY,
    run_id      VARCHAR NOT NULL,
    stage       VARCHAR NOT NULL,
    base_url    VARCHAR NOT NULL,
    request_set VARCHAR NOT NULL,  -- sha256 of the sorted cache keys it answers
    n_requests  INTEGER NOT NULL,
    status      VARCHAR NOT NULL,  -- submitted | ingested | failed
    created_at  TIMESTAMP NOT NULL
);

-- Inputs a stage left aside without judging them (eligible seeds beyond --limit), so every funnel row adds up.
ALTER TABLE stage_counts ADD COLUMN IF NOT EXISTS set_aside INTEGER DEFAULT 0;

-- The rule a verdict applied, without its measured value (score) or limit (threshold): what reasons group by.
ALTER TABLE verdicts ADD COLUMN IF NOT EXISTS rule VARCHAR;

-- Embedding vectors, one per text: the cache of `/embeddings` requests, keyed like LLM calls (endpoint, model,
-- text), so a text is embedded once whatever the batches it went out in.
CREATE TABLE IF NOT EXISTS embeddings (
    key        VARCHAR PRIMARY KEY,
    model      VARCHAR NOT NULL,
    vector     FLOAT[] NOT NULL,
    created_at TIMESTAMP NOT NULL
);

-- `ifsynth validity` results: how far a regenerated release ranks systems as the original does (the report).
CREATE TABLE IF NOT EXISTS validity (
    original    VARCHAR NOT NULL,
    regenerated VARCHAR NOT NULL,
    report      JSON NOT NULL,
    created_at  TIMESTAMP NOT NULL
);
