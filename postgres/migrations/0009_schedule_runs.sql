-- Schedules that run jobs (Berth's extension of seed 000's registry): an
-- entry may carry a job spec, which Berth submits at the times its cron
-- names. Times are unix nanoseconds, 0 for none.
--   job          the spec as JSON (berth.SubmitRequest), '' for a
--                display-only entry
--   run_from     when the job began to run on the cron (registration with
--                a job, or the last change of job or cron): no run before
--   last_run     the scheduled time of the last run started; claiming a
--                run is a compare-and-set on it, so that of the servers
--                sharing the database only one starts a run
--   last_job_id  the job that run submitted, '' for none (yet)
--   last_error   why that run's submission failed, '' if it did not
ALTER TABLE schedules
	ADD COLUMN job text NOT NULL DEFAULT '',
	ADD COLUMN run_from bigint NOT NULL DEFAULT 0,
	ADD COLUMN last_run bigint NOT NULL DEFAULT 0,
	ADD COLUMN last_job_id text NOT NULL DEFAULT '',
	ADD COLUMN last_error text NOT NULL DEFAULT '';
