# frozen_string_literal: true

# The drill's Puma cluster (bench/drill/run.rb): 2 workers × 4 threads,
# the app loaded once in the master before forking, as docs/rails.md's
# Puma setup is. The semian-bulkhead setup runs 8 workers × 1 thread
# (DRILL_WORKERS, DRILL_THREADS): the same 8 threads, in processes, as
# Semian's README allows its bulkhead.
workers Integer(ENV.fetch("DRILL_WORKERS", "2"))
threads_count = Integer(ENV.fetch("DRILL_THREADS", "4"))
threads threads_count, threads_count
preload_app!
bind "tcp://127.0.0.1:#{ENV.fetch('DRILL_PORT')}"
rackup File.expand_path("config.ru", __dir__)
environment "production"
quiet
