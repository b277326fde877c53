-- Adoption of the clusters Magnum's Cluster API drivers made (issue 25 item 2): an imported
-- cluster whose Cluster API objects were found on a management cluster is `adopted` (its status
-- comes from those objects; resize and delete act on them where they are).
ALTER TABLE imported_cluster DROP CONSTRAINT imported_cluster_state_check;
ALTER TABLE imported_cluster ADD CONSTRAINT imported_cluster_state_check
    CHECK (state IN ('read_only', 'adopted'));
