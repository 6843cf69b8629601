-- A job's row leaves out the attempt it is making while that attempt is
-- assigned and not yet started (the job is still pending): the agent's
-- acceptance writes the count with the running state, and the controller
-- counts the attempt back in when it loads such a job. Rows written before
-- counted it at assignment; this takes it out of them.
UPDATE jobs SET attempts = attempts - 1
WHERE state = 'pending' AND attempts > 0
	AND id IN (SELECT job_id FROM attempts WHERE state IN ('assigned', 'running'));
