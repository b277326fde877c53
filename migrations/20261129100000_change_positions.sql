-- Read-your-writes across replicas (src/view_cache.rs): every transaction that changes a
-- cluster, a nodegroup or a template moves one change position, and announces it on the views
-- channel (payload `position <n>`) after its other announcements. A read first reads the
-- committed position (one row, no lock) and reuses nothing its replica's listener has not caught
-- up to: a write answered on any replica is then seen by every read that starts after it.
--
-- The position is moved by a deferred constraint trigger, so at commit, and under the row's
-- lock until the transaction ends: positions are taken in commit order, with no gap (a rolled
-- back transaction's move is rolled back with it), and a transaction's announcements enter
-- PostgreSQL's notification queue (at commit, after its deferred triggers) before those of the
-- next one to move the position, so a listener that has received position n has received every
-- announcement of every transaction up to n. The lock is held only from the commit's triggers
-- to its end. Once per transaction: the row triggers of a transaction's later rows find its
-- transaction id in a transaction-local setting and return.
-- Fired where the other announcements fire (the role is not `replica`), as those are.
CREATE TABLE change_position (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    position bigint NOT NULL
);
INSERT INTO change_position (position) VALUES (0);

CREATE FUNCTION magnum_capi_move_change_position() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    moved bigint;
BEGIN
    IF current_setting('magnum_capi.position_moved_in', true) = pg_current_xact_id()::text THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('magnum_capi.position_moved_in', pg_current_xact_id()::text, true);
    UPDATE change_position SET position = position + 1 RETURNING position INTO moved;
    PERFORM pg_notify('magnum_capi_views', 'position ' || moved);
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER cluster_change_position AFTER INSERT OR UPDATE OR DELETE ON cluster
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_move_change_position();
CREATE CONSTRAINT TRIGGER nodegroup_change_position AFTER INSERT OR UPDATE OR DELETE ON nodegroup
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_move_change_position();
CREATE CONSTRAINT TRIGGER template_change_position
    AFTER INSERT OR UPDATE OR DELETE ON cluster_template
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_move_change_position();

-- A truncation (tests, an operator's repair) has no row trigger: it moves the position at once.
CREATE FUNCTION magnum_capi_move_change_position_now() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    moved bigint;
BEGIN
    UPDATE change_position SET position = position + 1 RETURNING position INTO moved;
    PERFORM pg_notify('magnum_capi_views', 'position ' || moved);
    RETURN NULL;
END $$;

CREATE TRIGGER cluster_change_position_truncated AFTER TRUNCATE ON cluster
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_move_change_position_now();
CREATE TRIGGER nodegroup_change_position_truncated AFTER TRUNCATE ON nodegroup
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_move_change_position_now();
CREATE TRIGGER template_change_position_truncated AFTER TRUNCATE ON cluster_template
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_move_change_position_now();
