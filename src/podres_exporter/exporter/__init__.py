"""The exporter's pipeline: read the node, poll on a cadence, expose what was read."""
