-- Each project's number of clusters kept in a row of its own, maintained by triggers in the
-- writing transaction, so the cluster quota check of a create (src/db/creates.rs) reads one row
-- instead of counting the project's clusters under the project's lock: with 10,000 clusters in a
-- project that count was a scan of 10,000 rows, and every create of the project waited behind it.
-- A row may reach 0 and stays; a project without a row holds no cluster.
CREATE TABLE cluster_project_count (
    project_id text PRIMARY KEY,
    clusters   bigint NOT NULL
);

-- Adds a statement's inserted (`added`) or deleted (`removed`) rows to their projects' counts,
-- one row change per project, in project_id order: two statements writing several projects lock
-- their rows in one order and cannot deadlock on them. A cascaded delete (a template's, a
-- management cluster's) is a statement of its own and fires this too.
CREATE FUNCTION magnum_capi_count_clusters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cluster_project_count AS n (project_id, clusters)
        SELECT project_id, count(*) FROM added GROUP BY project_id ORDER BY project_id
        ON CONFLICT (project_id) DO UPDATE SET clusters = n.clusters + excluded.clusters;
    ELSE
        INSERT INTO cluster_project_count AS n (project_id, clusters)
        SELECT project_id, -count(*) FROM removed GROUP BY project_id ORDER BY project_id
        ON CONFLICT (project_id) DO UPDATE SET clusters = n.clusters + excluded.clusters;
    END IF;
    RETURN NULL;
END $$;

-- A cluster moved to another project (hand-made SQL, an import's upsert): its old project's
-- count down, its new one's up, in project_id order. A row trigger with a WHEN, not a statement
-- trigger with transition tables: those would make every UPDATE of cluster (the status writer's
-- passes) copy each row it writes, twice, for a change the service never makes.
CREATE FUNCTION magnum_capi_move_cluster_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cluster_project_count AS n (project_id, clusters)
    SELECT p, d FROM (VALUES (OLD.project_id, -1), (NEW.project_id, 1)) AS v (p, d) ORDER BY p
    ON CONFLICT (project_id) DO UPDATE SET clusters = n.clusters + excluded.clusters;
    RETURN NULL;
END $$;

CREATE FUNCTION magnum_capi_cluster_counts_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cluster_project_count;
    RETURN NULL;
END $$;

CREATE TRIGGER cluster_counted_in AFTER INSERT ON cluster REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_count_clusters();
CREATE TRIGGER cluster_counted_out AFTER DELETE ON cluster REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_count_clusters();
CREATE TRIGGER cluster_count_moved AFTER UPDATE OF project_id ON cluster
    FOR EACH ROW WHEN (OLD.project_id IS DISTINCT FROM NEW.project_id)
    EXECUTE FUNCTION magnum_capi_move_cluster_count();
CREATE TRIGGER cluster_counts_truncated AFTER TRUNCATE ON cluster
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_cluster_counts_truncated();

-- Fired whatever `session_replication_role` says (a bulk load or a logical replication
-- subscriber with triggers off, as the stored views' triggers are): a count that missed a write
-- would let a project past its quota, or hold it below.
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_counted_in;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_counted_out;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_count_moved;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_counts_truncated;

-- Filled after the triggers exist: CREATE TRIGGER's lock on cluster waited for the writers in
-- flight and keeps new ones out until this migration commits, so every committed row is counted
-- here and every later one by the triggers.
INSERT INTO cluster_project_count (project_id, clusters)
SELECT project_id, count(*) FROM cluster GROUP BY project_id;

-- The quota check reads the project's count under the project's lock (same signature and
-- answer as the function it replaces: the limit when the project is at it, else NULL). The
-- count is read with a snapshot taken after the lock (VOLATILE: each statement here takes its
-- own), so it holds every create of the project committed before the lock was granted; a create
-- holding the lock has its insert counted by the time it commits.
CREATE OR REPLACE FUNCTION magnum_capi_cluster_quota_reached(project text, default_limit bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lim bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('quota:' || project));
    SELECT hard_limit INTO lim FROM quotas WHERE project_id = project AND resource = 'Cluster';
    lim := COALESCE(lim, default_limit);
    IF COALESCE((SELECT clusters FROM cluster_project_count WHERE project_id = project), 0)
       >= lim THEN
        RETURN lim;
    END IF;
    RETURN NULL;
END $$;
