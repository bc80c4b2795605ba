# Checks every C file against .clang-format; exits 77 (skip) when clang-format is absent.
if(NOT CLANG_FORMAT)
  message("clang-format not found: skipping")
  cmake_language(EXIT 77)
endif()
file(GLOB_RECURSE files ${ROOT}/model/*.[ch] ${ROOT}/io/*.[ch] ${ROOT}/jobs/*.[ch]
     ${ROOT}/harvest/*.[ch] ${ROOT}/tests/*.[ch])
execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror ${files} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "clang-format differences (run clang-format -i on the files above)")
endif()
