"""The long-running exporter: app (config -> checks -> scheduler), HTTP server, logs."""
