-- The cluster quota check of a create (src/db/creates.rs), as one call inside the statement
-- that records the create: the project's lock (the advisory lock every create of the project
-- takes, held until the statement's transaction ends — the key earlier releases use, so
-- replicas of both versions exclude each other during a rolling upgrade), then the count.
-- VOLATILE: each statement here takes a snapshot of its own, so the count sees every create
-- of the project committed before the lock was granted (the calling statement's snapshot is
-- older). Returns the limit when the project is at it, NULL when there is room; the count
-- stops at the limit.
CREATE FUNCTION magnum_capi_cluster_quota_reached(project text, default_limit bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lim bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('quota:' || project));
    SELECT hard_limit INTO lim FROM quotas WHERE project_id = project AND resource = 'Cluster';
    lim := COALESCE(lim, default_limit);
    IF (SELECT count(*) FROM (SELECT 1 FROM cluster WHERE project_id = project
                               LIMIT greatest(lim, 0)) c) >= lim THEN
        RETURN lim;
    END IF;
    RETURN NULL;
END $$;
