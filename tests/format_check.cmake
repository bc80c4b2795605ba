# Checks every C file against .clang-format. Without clang-format it prints "clang-format not
# found: skipping", which the test's SKIP_REGULAR_EXPRESSION turns into a skip (CMake 3.25, as on
# Debian 12, has no cmake_language(EXIT)).
if(NOT CLANG_FORMAT)
  message("clang-format not found: skipping")
  return()
endif()
file(GLOB_RECURSE files ${ROOT}/model/*.[ch] ${ROOT}/io/*.[ch] ${ROOT}/jobs/*.[ch]
     ${ROOT}/harvest/*.[ch] ${ROOT}/tests/*.[ch])
execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror ${files} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "clang-format differences (run clang-format -i on the files above)")
endif()
