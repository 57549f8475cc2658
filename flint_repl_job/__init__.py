"""The Spark job: owns one session, runs its statements, writes results and moves states."""
