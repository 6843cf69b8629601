-- A job's end is an update of its row that PostgreSQL cannot make in
-- place (its state is indexed), so it inserts the new version into every
-- index of jobs: at the no-op benchmark's rate most of what the end of a
-- job cost the database. Succeeded jobs, nearly all of a busy store's,
-- are left out of jobs_state: the restart's load reads pending and running
-- jobs, and listings of failed or cancelled jobs stay indexed; a listing of
-- succeeded jobs walks the jobs newest first, which finds them at once.
-- jobs_queue goes: a listing by queue walks the jobs newest first, as one by
-- user always has.
DROP INDEX jobs_queue;
DROP INDEX jobs_state;
CREATE INDEX jobs_state ON jobs (state, id) WHERE state <> 'succeeded';
