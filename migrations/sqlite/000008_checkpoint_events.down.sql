DROP TABLE checkpoint_events_horizon;
DROP TABLE checkpoint_events;
