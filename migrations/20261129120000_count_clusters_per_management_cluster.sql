-- Each management cluster's number of clusters kept in a row of its own, maintained by triggers
-- in the writing transaction, so the placement of a create (src/service/placement.rs) reads one
-- row per management cluster instead of counting every cluster: with 10,000 clusters that count
-- was a scan of the whole table in every create. `''` stands for the unnamed management cluster
-- (a NULL `cluster.management_cluster`). A row may reach 0 and stays.
CREATE TABLE cluster_management_count (
    management_cluster text PRIMARY KEY,
    clusters           bigint NOT NULL
);

-- A statement's inserted (`added`) or deleted (`removed`) rows added to their management
-- clusters' counts, one row change per management cluster, in key order (two statements cannot
-- deadlock on them). Statement triggers with transition tables, as the project counts'
-- (20261128100000_statement_level_cluster_triggers.sql): creates recorded together share one call.
CREATE FUNCTION magnum_capi_count_placed_clusters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cluster_management_count AS n (management_cluster, clusters)
        SELECT COALESCE(management_cluster, ''), count(*) FROM added GROUP BY 1 ORDER BY 1
        ON CONFLICT (management_cluster) DO UPDATE SET clusters = n.clusters + excluded.clusters;
    ELSE
        INSERT INTO cluster_management_count AS n (management_cluster, clusters)
        SELECT COALESCE(management_cluster, ''), -count(*) FROM removed GROUP BY 1 ORDER BY 1
        ON CONFLICT (management_cluster) DO UPDATE SET clusters = n.clusters + excluded.clusters;
    END IF;
    RETURN NULL;
END $$;

-- A cluster given another management cluster (an import's placement): the old one's count
-- down, the new one's up. A row trigger with a WHEN: the status writer's updates never change
-- the column and pay nothing.
CREATE FUNCTION magnum_capi_move_placed_cluster() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cluster_management_count AS n (management_cluster, clusters)
    SELECT m, d FROM (VALUES (COALESCE(OLD.management_cluster, ''), -1),
                             (COALESCE(NEW.management_cluster, ''), 1)) AS v (m, d) ORDER BY m
    ON CONFLICT (management_cluster) DO UPDATE SET clusters = n.clusters + excluded.clusters;
    RETURN NULL;
END $$;

CREATE FUNCTION magnum_capi_placed_counts_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cluster_management_count;
    RETURN NULL;
END $$;

CREATE TRIGGER cluster_placed_in AFTER INSERT ON cluster REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_count_placed_clusters();
CREATE TRIGGER cluster_placed_out AFTER DELETE ON cluster REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_count_placed_clusters();
CREATE TRIGGER cluster_placement_moved AFTER UPDATE OF management_cluster ON cluster
    FOR EACH ROW WHEN (OLD.management_cluster IS DISTINCT FROM NEW.management_cluster)
    EXECUTE FUNCTION magnum_capi_move_placed_cluster();
CREATE TRIGGER cluster_placed_counts_truncated AFTER TRUNCATE ON cluster
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_placed_counts_truncated();

-- Kept whatever `session_replication_role` says, as the project counts are: a bulk load with
-- triggers off must not leave placement counting wrong.
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_placed_in;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_placed_out;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_placement_moved;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_placed_counts_truncated;

-- Filled after the triggers exist: CREATE TRIGGER's lock on cluster keeps writers out until this
-- migration commits, so every committed row is counted here and every later one by the triggers.
INSERT INTO cluster_management_count (management_cluster, clusters)
SELECT COALESCE(management_cluster, ''), count(*) FROM cluster GROUP BY 1;
