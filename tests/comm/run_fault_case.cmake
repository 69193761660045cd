# One fault test: launch comm_fault_job under mpiexec and check that the job
#   1. exits non-zero,   2. within LIMIT seconds,   3. with output matching EXPECT (the rank).
#   cmake -DMPIEXEC=... -DJOB=... -DMODE=throw -DRANKS=3 -DFAIL_RANK=1 -DEXPECT=regex -DLIMIT=30
#         -P run_fault_case.cmake
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${MPIEXEC} -n ${RANKS} --oversubscribe ${JOB} ${MODE} ${FAIL_RANK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
set(all "${out}\n${err}")
message(STATUS "mode ${MODE}: exit status '${rc}' after ${elapsed} s; output:\n${all}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "mode ${MODE}: the job exited 0, but rank ${FAIL_RANK} failed on purpose: it must exit non-zero")
endif()
if(rc MATCHES "timeout|Process terminated")
  message(FATAL_ERROR "mode ${MODE}: the job hung (killed after 90 s); a failed rank must end it within ${LIMIT} s")
endif()
if(elapsed GREATER LIMIT)
  message(FATAL_ERROR "mode ${MODE}: the job took ${elapsed} s to end; the limit is ${LIMIT} s")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "mode ${MODE}: the output does not say '${EXPECT}' (it must name the failed rank)")
endif()
message(STATUS "mode ${MODE}: ended non-zero (${rc}) in ${elapsed} s, naming the failure as expected")
