-- The heads of the shows read together (`db::cluster_views::shows`): the clusters `uuids` with
-- their stored views. A function so that its statement is planned once per connection: as a
-- plain prepared statement, `uuid = ANY($1)` was planned anew for every batch (its custom plan,
-- costed for the few uuids bound, always looked cheaper than the generic one), which was a
-- quarter of the machine's time under a load of shows.
CREATE FUNCTION magnum_capi_cluster_heads(uuids uuid[])
RETURNS TABLE (id bigint, uuid uuid, project_id text, user_id text, management_cluster text,
               body bytea)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
        SELECT t.id, t.uuid, t.project_id, t.user_id, t.management_cluster, v.body
          FROM cluster t LEFT JOIN cluster_view v ON v.cluster_uuid = t.uuid
         WHERE t.uuid = ANY(uuids);
END $$;
