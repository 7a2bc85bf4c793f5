"""Building images and venv overlays: pure planners (plan/), the executors that carry plans out (execute/), and the
sessions that tie a spec, its lock, the store and the executors together (sessions/)."""
