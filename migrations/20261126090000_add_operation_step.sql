-- Where a long operation is (a delete waiting for Cluster API, a CA rotation phase rolling out):
-- written by the worker when the backend hands a step back, read back when the operation runs
-- again. NULL until the first step is recorded. Replicas of the previous version ignore it.
ALTER TABLE operation ADD COLUMN step jsonb;
