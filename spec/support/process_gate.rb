# frozen_string_literal: true

# A barrier across forked processes: children `wait` until the parent
# `open!`s it, which releases them all at once (their pipe reaches end of
# file). Made before the children are forked; each child closes the
# parent's end (`forget_parent_end`) before it waits. The deadline only
# turns a hang into a failure; no assertion depends on how long anything
# takes.
class ProcessGate
  # The gate was not opened in time.
  class Stuck < StandardError; end

  def initialize
    @reader, @writer = IO.pipe
  end

  # In a child: blocks until the parent opens the gate.
  def wait(within: 30)
    raise Stuck, "gate not opened within #{within}s" unless IO.select([@reader], nil, nil, within)

    @reader.read(1)
    nil
  end

  # In the parent: releases every waiting child.
  def open!
    @writer.close unless @writer.closed?
  end

  # In a child: the parent's end must not stay open there too.
  def forget_parent_end
    @writer.close unless @writer.closed?
  end
end
