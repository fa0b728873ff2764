DO $$
BEGIN
    EXECUTE 'ALTER TABLE checkpoint_participants ALTER COLUMN committables SET COMPRESSION default';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    NULL;
END
$$;
