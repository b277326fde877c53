-- What a create runs is planned once per connection, as `magnum_capi_cluster_heads` is. Under
-- PostgreSQL's default plan cache mode a statement that takes a parameter or a PL/pgSQL
-- variable (the uuids a nodegroup write touched, the project a quota lock is taken for, the
-- creates' document, the template uuids looked up together) is planned again on every call
-- while its custom plan, costed for the values bound, looks cheaper than the generic one, which
-- for these statements is always. Replanning was a fifth of PostgreSQL's time in a create
-- alone (perf; README Benchmarks, "What a create waits for"). No plan here depends on the
-- values: every statement reads by primary key, unique key or a transition table, so the
-- generic plan is the one the custom plans were.
ALTER FUNCTION magnum_capi_clusters_changed() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION magnum_capi_nodegroups_changed() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION magnum_capi_cluster_quota_rooms(text[], bigint)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION magnum_capi_cluster_quota_reached(text, bigint)
    SET plan_cache_mode = force_generic_plan;

-- Creates recorded together (src/db/creates.rs): `docs` is a JSON array of creates, each the
-- rows it writes by column name (`cluster`, `nodegroups`, `operation`). Each project's creates
-- take its room under the cluster quota (`magnum_capi_cluster_quota_rooms`: its lock, in key
-- order) in the order of the array; the others write nothing. Returns, for each create in that
-- order, NULL when its rows were written, else the project's limit. The created operations are
-- announced to the workers. VOLATILE: the quota is read under its lock, after the call began.
CREATE FUNCTION magnum_capi_record_creates(docs jsonb, default_limit bigint)
RETURNS TABLE (create_ord bigint, quota_limit bigint)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    WITH input AS MATERIALIZED (
       SELECT e.ord, e.doc, e.doc->'cluster'->>'project_id' AS project
         FROM jsonb_array_elements(docs) WITH ORDINALITY AS e (doc, ord)),
     room AS MATERIALIZED (
       SELECT q.project_id AS project, q.room, q.hard_limit
         FROM magnum_capi_cluster_quota_rooms(ARRAY(SELECT i.project FROM input i),
                                              default_limit) q),
     ranked AS MATERIALIZED (
       SELECT i.ord, i.doc, r.hard_limit,
              row_number() OVER (PARTITION BY i.project ORDER BY i.ord) <= r.room AS fits
         FROM input i JOIN room r ON r.project = i.project),
     c AS (
       INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, keypair,
           docker_volume_size, labels, master_flavor_id, flavor_id, stack_id, status,
           status_reason, health_status, health_status_reason, create_timeout, discovery_url,
           fixed_network, fixed_subnet, floating_ip_enabled, master_lb_enabled, resolved,
           management_cluster)
       SELECT c.uuid, c.project_id, c.user_id, c.name, c.cluster_template_id, c.keypair,
           c.docker_volume_size, c.labels, c.master_flavor_id, c.flavor_id, c.stack_id,
           c.status, c.status_reason, c.health_status, c.health_status_reason,
           c.create_timeout, c.discovery_url, c.fixed_network, c.fixed_subnet,
           c.floating_ip_enabled, c.master_lb_enabled, c.resolved, c.management_cluster
         FROM ranked r, jsonb_populate_record(NULL::cluster, r.doc->'cluster') c
        WHERE r.fits ORDER BY r.ord),
     ng AS (
       INSERT INTO nodegroup (uuid, name, cluster_id, project_id, docker_volume_size, labels,
           flavor_id, image_id, node_addresses, node_count, role, max_node_count,
           min_node_count, is_default, stack_id, status, status_reason, version, node_labels,
           node_taints)
       SELECT n.uuid, n.name, n.cluster_id, n.project_id, n.docker_volume_size, n.labels,
           n.flavor_id, n.image_id, n.node_addresses, n.node_count, n.role,
           n.max_node_count, n.min_node_count, n.is_default, n.stack_id, n.status,
           n.status_reason, n.version, n.node_labels, n.node_taints
         FROM ranked r, jsonb_populate_recordset(NULL::nodegroup, r.doc->'nodegroups') n
        WHERE r.fits ORDER BY r.ord),
     op AS (
       INSERT INTO operation (cluster_uuid, nodegroup_uuid, kind, payload, request_id)
       SELECT o.cluster_uuid, o.nodegroup_uuid, o.kind, o.payload, o.request_id
         FROM ranked r, jsonb_populate_record(NULL::operation, r.doc->'operation') o
        WHERE r.fits ORDER BY r.ord
       RETURNING id),
     woken AS MATERIALIZED (
       SELECT count(pg_notify('magnum_capi_operations', op.id::text)) FROM op)
     SELECT r.ord, CASE WHEN r.fits THEN NULL ELSE r.hard_limit END
       FROM ranked r, woken ORDER BY r.ord;
END $$;

-- Templates looked up together by uuid (`db::templates::batched`), in a function for the same
-- reason as the heads: `uuid = ANY($1)` as a prepared statement was planned for every batch.
CREATE FUNCTION magnum_capi_templates_by_uuid(uuids uuid[]) RETURNS SETOF cluster_template
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY SELECT * FROM cluster_template t WHERE t.uuid = ANY(uuids);
END $$;
