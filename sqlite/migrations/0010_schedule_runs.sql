-- Schedules that run jobs (Berth's extension of seed 000's registry): an
-- entry may carry a job spec, which Berth submits at the times its cron
-- names. Times are unix nanoseconds, 0 for none.
--   job          the spec as JSON (berth.SubmitRequest), '' for a
--                display-only entry
--   run_from     when the job began to run on the cron (registration with
--                a job, or the last change of job or cron): no run before
--   last_run     the scheduled time of the last run started; claiming a
--                run is a compare-and-set on it, so no run starts twice
--   last_job_id  the job that run submitted, '' for none (yet)
--   last_error   why that run's submission failed, '' if it did not
ALTER TABLE schedules ADD COLUMN job TEXT NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN run_from INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN last_run INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN last_job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
