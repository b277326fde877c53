-- A create's document is smaller (src/db/creates.rs): its NULL columns are left out, and so are
-- its nodegroups' labels when they are the cluster's, which they are unless set apart. Parsing
-- the documents was a fifth of the statement's time (perf), most of it the same labels three
-- times. A nodegroup without `labels` takes its cluster's; a document that has them (a replica
-- of the previous version writes every column) is read as before.
CREATE OR REPLACE FUNCTION magnum_capi_record_creates(docs jsonb, default_limit bigint)
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
       SELECT n.uuid, n.name, n.cluster_id, n.project_id, n.docker_volume_size,
           COALESCE(n.labels, r.doc->'cluster'->'labels'),
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

-- Operations recorded are announced to the status writers once per statement, not by a row
-- trigger per operation: a batch of creates fired one PL/pgSQL call per create for it. A change
-- of state stays a row trigger (transition tables cannot go with a column list). As before, a
-- change applied with `session_replication_role = replica` is not announced, and a statement
-- that records nothing is silent.
CREATE FUNCTION magnum_capi_operations_recorded() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('magnum_capi_clusters', cluster_uuid::text)
       FROM (SELECT DISTINCT cluster_uuid FROM added) a;
    RETURN NULL;
END $$;

DROP TRIGGER operation_changed ON operation;
CREATE TRIGGER operations_recorded AFTER INSERT ON operation
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_operations_recorded();
CREATE TRIGGER operation_state_changed AFTER UPDATE OF state ON operation
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_operation_changed();
