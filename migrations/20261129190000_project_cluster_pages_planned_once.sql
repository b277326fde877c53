-- A project's page of clusters in id order (the default list and detail pages), as a function so
-- that it is planned once per connection (src/db/cluster_views.rs). As a prepared statement
-- PostgreSQL planned it again at every execution: with the project known, each custom plan was
-- estimated cheaper than the generic one, and its planning took longer than its execution (the
-- bench's mixed reads, pg_stat_statements: 0.22 ms planning, 0.16 ms executing, every call).
-- The generic plan is the one range of `cluster (project_id, id)` between two row bounds (see
-- 20261129170000_cluster_pages_by_project.sql) from `marker` (a uuid in `project`; none: the
-- project's first or last row). A marker not in the project bounds nothing: an empty page.
CREATE FUNCTION magnum_capi_project_cluster_page(project text, marker uuid, descending boolean,
                                                 page_size bigint)
RETURNS TABLE (id bigint, uuid uuid, project_id text, user_id text, management_cluster text,
               body bytea)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF descending THEN
        RETURN QUERY
            SELECT t.id, t.uuid, t.project_id, t.user_id, t.management_cluster, v.body
              FROM cluster t LEFT JOIN cluster_view v ON v.cluster_uuid = t.uuid
             WHERE (t.project_id, t.id) >= (project, -9223372036854775808)
               AND (t.project_id, t.id) < (project, CASE WHEN marker IS NULL
                   THEN 9223372036854775807
                   ELSE (SELECT m.id FROM cluster m WHERE m.uuid = marker AND m.project_id = project) END)
             ORDER BY t.project_id DESC, t.id DESC
             LIMIT page_size;
    ELSE
        RETURN QUERY
            SELECT t.id, t.uuid, t.project_id, t.user_id, t.management_cluster, v.body
              FROM cluster t LEFT JOIN cluster_view v ON v.cluster_uuid = t.uuid
             WHERE (t.project_id, t.id) > (project, CASE WHEN marker IS NULL
                   THEN -9223372036854775808
                   ELSE (SELECT m.id FROM cluster m WHERE m.uuid = marker AND m.project_id = project) END)
               AND (t.project_id, t.id) <= (project, 9223372036854775807)
             ORDER BY t.project_id, t.id
             LIMIT page_size;
    END IF;
END $$;
