# frozen_string_literal: true

# The drill's Puma cluster (bench/drill/run.rb): 2 workers × 4 threads,
# the app loaded once in the master before forking, as docs/rails.md's
# Puma setup is.
workers 2
threads 4, 4
preload_app!
bind "tcp://127.0.0.1:#{ENV.fetch('DRILL_PORT')}"
rackup File.expand_path("config.ru", __dir__)
environment "production"
quiet
