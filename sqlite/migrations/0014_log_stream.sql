-- The stream each chunk of output was written to: 'stderr', or '' for
-- stdout (and for output written before streams were told apart).
ALTER TABLE logs ADD COLUMN stream TEXT NOT NULL DEFAULT '';
