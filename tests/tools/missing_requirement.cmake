# Stands in for a test whose requirement is missing: fails with the reason.
message(FATAL_ERROR "cannot run this test: ${REASON}")
