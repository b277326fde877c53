-- What a write of clusters and nodegroups keeps up to date (each project's count, each cluster's
-- stored view) and announces (the view and status channels) now happens once per statement, from
-- its transition tables, instead of in three row triggers per cluster row and two per nodegroup
-- row. A create fired eight PL/pgSQL calls (three for the cluster, four for its two
-- nodegroups, one for the count) and the removal of a cluster seven: each one sets up and runs
-- its statements again, and together they were half of PostgreSQL's time in a create. Now a
-- statement of any number of clusters fires one call per table, so creates recorded together
-- (src/db/creates.rs) share them.
--
-- Same rules as the triggers replaced:
-- * the count and the stored views are kept whatever `session_replication_role` says (ENABLE
--   ALWAYS): a logical replication subscriber or a bulk load with triggers off must neither miss
--   a count nor leave a stored view standing over a change;
-- * the announcements go out only where ordinary triggers fire (the role is not `replica`), as
--   the row triggers' did: a change applied by a subscriber is not announced by it;
-- * a statement that changes no row is silent;
-- * a cluster's view is retired at most once per transaction (`retired_in`), its version taken
--   from the sequence.
-- Rows are locked in key order (the count's by project, the views' by uuid), so two statements
-- writing several clusters cannot deadlock on them.

-- Clusters inserted, updated or deleted. Inserted: counted in. Deleted: counted out, their views
-- removed, announced to the view caches only (the status writers were never told of a delete).
-- Updated: the views of a uuid that went away removed (a project change moves the count in
-- `cluster_count_moved`, a row trigger with a WHEN, which costs nothing on the status writer's
-- updates). Inserted or updated: their views retired (made if missing), announced. One function
-- for the three triggers: each names only the transition tables its event has.
CREATE FUNCTION magnum_capi_clusters_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT FROM before) THEN
            RETURN NULL;
        END IF;
        INSERT INTO cluster_project_count AS n (project_id, clusters)
        SELECT project_id, -count(*) FROM before GROUP BY project_id ORDER BY project_id
        ON CONFLICT (project_id) DO UPDATE SET clusters = n.clusters + excluded.clusters;
        DELETE FROM cluster_view WHERE cluster_uuid IN (SELECT uuid FROM before);
        IF current_setting('session_replication_role') <> 'replica' THEN
            PERFORM pg_notify('magnum_capi_views', 'cluster');
        END IF;
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT FROM after) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cluster_project_count AS n (project_id, clusters)
        SELECT project_id, count(*) FROM after GROUP BY project_id ORDER BY project_id
        ON CONFLICT (project_id) DO UPDATE SET clusters = n.clusters + excluded.clusters;
    ELSE
        DELETE FROM cluster_view
         WHERE cluster_uuid IN (SELECT uuid FROM before EXCEPT SELECT uuid FROM after);
    END IF;
    INSERT INTO cluster_view AS v (cluster_uuid) SELECT uuid FROM after ORDER BY uuid
    ON CONFLICT (cluster_uuid) DO UPDATE
       SET version = nextval('cluster_view_version'), body = NULL, retired_in = pg_current_xact_id()
     WHERE v.retired_in IS DISTINCT FROM pg_current_xact_id() OR v.body IS NOT NULL;
    IF current_setting('session_replication_role') <> 'replica' THEN
        PERFORM pg_notify('magnum_capi_views', 'cluster');
        PERFORM pg_notify('magnum_capi_clusters', uuid::text) FROM after;
    END IF;
    RETURN NULL;
END $$;

-- Nodegroups inserted, updated or deleted: their clusters' views retired (an update retires
-- the old and the new cluster's), announced. One function for the three triggers: each names
-- only the transition tables its event has.
CREATE FUNCTION magnum_capi_nodegroups_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    clusters uuid[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        clusters := ARRAY(SELECT cluster_id FROM after);
    ELSIF TG_OP = 'UPDATE' THEN
        clusters := ARRAY(SELECT cluster_id FROM before UNION ALL SELECT cluster_id FROM after);
    ELSE
        clusters := ARRAY(SELECT cluster_id FROM before);
    END IF;
    IF cardinality(clusters) = 0 THEN
        RETURN NULL;
    END IF;
    UPDATE cluster_view v
       SET version = nextval('cluster_view_version'), body = NULL, retired_in = pg_current_xact_id()
      FROM (SELECT cluster_uuid FROM cluster_view
             WHERE cluster_uuid = ANY (clusters)
               AND (retired_in IS DISTINCT FROM pg_current_xact_id() OR body IS NOT NULL)
             ORDER BY cluster_uuid FOR UPDATE) l
     WHERE v.cluster_uuid = l.cluster_uuid;
    IF current_setting('session_replication_role') <> 'replica' THEN
        PERFORM pg_notify('magnum_capi_views', 'nodegroup');
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER cluster_changed ON cluster;
DROP TRIGGER cluster_views_changed ON cluster;
DROP TRIGGER cluster_view_changed ON cluster;
DROP TRIGGER cluster_counted_in ON cluster;
DROP TRIGGER cluster_counted_out ON cluster;
DROP TRIGGER nodegroup_views_changed ON nodegroup;
DROP TRIGGER nodegroup_view_changed ON nodegroup;

CREATE TRIGGER clusters_inserted AFTER INSERT ON cluster
    REFERENCING NEW TABLE AS after
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_clusters_changed();
CREATE TRIGGER clusters_updated AFTER UPDATE ON cluster
    REFERENCING OLD TABLE AS before NEW TABLE AS after
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_clusters_changed();
CREATE TRIGGER clusters_deleted AFTER DELETE ON cluster
    REFERENCING OLD TABLE AS before
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_clusters_changed();
CREATE TRIGGER nodegroups_inserted AFTER INSERT ON nodegroup
    REFERENCING NEW TABLE AS after
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_nodegroups_changed();
CREATE TRIGGER nodegroups_updated AFTER UPDATE ON nodegroup
    REFERENCING OLD TABLE AS before NEW TABLE AS after
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_nodegroups_changed();
CREATE TRIGGER nodegroups_deleted AFTER DELETE ON nodegroup
    REFERENCING OLD TABLE AS before
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_nodegroups_changed();

ALTER TABLE cluster ENABLE ALWAYS TRIGGER clusters_inserted;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER clusters_updated;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER clusters_deleted;
ALTER TABLE nodegroup ENABLE ALWAYS TRIGGER nodegroups_inserted;
ALTER TABLE nodegroup ENABLE ALWAYS TRIGGER nodegroups_updated;
ALTER TABLE nodegroup ENABLE ALWAYS TRIGGER nodegroups_deleted;

-- Creates recorded together (src/db/creates.rs): the room each of `projects` has under its
-- cluster quota (its `quotas` row, else `default_limit`), each asked under the project's lock
-- as `magnum_capi_cluster_quota_reached` asks it (same lock key, so replicas of the previous
-- version exclude these too). The locks are taken in the order of their keys, so statements
-- asking for several projects never wait for each other in a cycle (two names whose keys
-- collide are one lock). VOLATILE: each count is read with a snapshot taken after its lock.
CREATE FUNCTION magnum_capi_cluster_quota_rooms(projects text[], default_limit bigint)
RETURNS TABLE (project_id text, room bigint, hard_limit bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    p text;
    lim bigint;
BEGIN
    FOR p IN SELECT u FROM unnest(projects) u GROUP BY u
              ORDER BY hashtext('quota:' || u), u LOOP
        PERFORM pg_advisory_xact_lock(hashtext('quota:' || p));
        SELECT q.hard_limit INTO lim FROM quotas q
         WHERE q.project_id = p AND q.resource = 'Cluster';
        lim := COALESCE(lim, default_limit);
        project_id := p;
        hard_limit := lim;
        room := greatest(lim - COALESCE((SELECT n.clusters FROM cluster_project_count n
                                          WHERE n.project_id = p), 0), 0);
        RETURN NEXT;
    END LOOP;
END $$;
