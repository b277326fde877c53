-- Clusters looked up together by uuid (`db::clusters::reads`: the cluster a request names by
-- uuid, a nodegroup read's among them, read with the concurrent ones in one statement), in a
-- function for the same reason as the shows' heads: `uuid = ANY($1)` as a prepared statement is
-- planned for every batch. The caller's scope is applied to the rows it returns.
CREATE FUNCTION magnum_capi_clusters_by_uuid(uuids uuid[]) RETURNS SETOF cluster
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY SELECT * FROM cluster t WHERE t.uuid = ANY(uuids);
END $$;

-- The nodegroups of clusters looked up together by the cluster's uuid (`db::nodegroups::reads`:
-- a nodegroup show finds its nodegroup among its cluster's), in id order, planned once per
-- connection for the same reason.
CREATE FUNCTION magnum_capi_nodegroups_of_clusters(uuids uuid[]) RETURNS SETOF nodegroup
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY SELECT * FROM nodegroup n WHERE n.cluster_id = ANY(uuids) ORDER BY n.id;
END $$;
