# hakmem_add_test(<name> <source>... [NO_TEST] [PLAIN] [TIMEOUT <seconds>] [ARGS <arg>...])
#
# Builds one test program linked to the `hakmem` library (so its malloc, free and
# operator new/delete are hakmem's) and registers it with ctest under <name>, unless
# NO_TEST: then only another build's run of it is registered (tests/CMakeLists.txt).
# PLAIN: linked dynamically with no allocator, for a test that preloads one.
#
# The compiler must not reason about allocation calls it believes it knows: it may
# delete a malloc/free pair, assume calloc's memory is zero or fold an alignment check.
# Hence -fno-builtin-<fn> for the C allocation functions and -fno-allocation-dce in C++.

find_package(Threads REQUIRED)

set(HAKMEM_TEST_COMMON_DIR "${CMAKE_CURRENT_LIST_DIR}")

# hakmem_test_link(<target> <library>): links a test program with `hakmem`,
# `hakmem_secure` or no allocator (""). With HAKMEM_TEST_STATIC (.ci/static) every test
# program is a static executable (-static), and `hakmem` means libhakmem.a.
function(hakmem_test_link target library)
  if(HAKMEM_TEST_STATIC)
    if(library STREQUAL "hakmem")
      set(library hakmem_static)
    endif()
    target_link_options(${target} PRIVATE -static)
  endif()
  target_link_libraries(${target} PRIVATE ${library} Threads::Threads)
endfunction()

function(hakmem_add_test name)
  cmake_parse_arguments(PARSE_ARGV 1 T "NO_TEST;PLAIN" "TIMEOUT" "ARGS")
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_UNPARSED_ARGUMENTS})
  if(T_PLAIN)
    target_link_libraries(${name} PRIVATE Threads::Threads)
  else()
    hakmem_test_link(${name} hakmem)
  endif()
  target_include_directories(${name} PRIVATE
    "${HAKMEM_TEST_COMMON_DIR}" "${HAKMEM_TEST_COMMON_DIR}/../../include")
  set_target_properties(${name} PROPERTIES
    C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS ON
    CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS ON)
  target_compile_options(${name} PRIVATE
    -Wall -Wextra
    $<$<COMPILE_LANGUAGE:C>:-fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc
      -fno-builtin-free -fno-builtin-aligned_alloc -fno-builtin-posix_memalign>
    $<$<COMPILE_LANGUAGE:CXX>:-fno-allocation-dce -fno-builtin-malloc -fno-builtin-free>)
  if(NOT T_NO_TEST)
    add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT})
  endif()
endfunction()

# hakmem_add_tsan_test(<name> <source> [ENV <var=value>...] [ARGS <arg>...])
#
# With HAKMEM_TSAN: builds <source> against the ThreadSanitizer builds of hakmem's core
# (everything but the standard names and the C++ operators, which TSan keeps for itself)
# with tsan_names.h renaming the test's allocation calls to hak_*, and registers
# tsan_<name> (default core) and tsan_secure_<name> (hardened core). Any report fails them.
function(hakmem_add_tsan_test name source)
  if(NOT TARGET hakmem_tsan_core)
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 2 T "" "" "ENV;ARGS")
  foreach(variant "" secure_)
    set(exe tsan_${variant}${name})
    set(core hakmem_tsan_${variant}core)
    add_executable(${exe} ${source} $<TARGET_OBJECTS:${core}>)
    target_include_directories(${exe} PRIVATE
      "${HAKMEM_TEST_COMMON_DIR}" "${HAKMEM_TEST_COMMON_DIR}/../../include")
    target_compile_options(${exe} PRIVATE -Wall -Wextra -fsanitize=thread
      -include "${HAKMEM_TEST_COMMON_DIR}/tsan_names.h")
    target_link_options(${exe} PRIVATE -fsanitize=thread)
    target_link_libraries(${exe} PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
    set_target_properties(${exe} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS ON)
    # Without address-space randomisation where setarch can turn it off: TSan's fixed
    # shadow layout does not fit every kernel's mmap randomisation (vm.mmap_rnd_bits
    # above 28 on some), and randomisation buys nothing in a test.
    add_test(NAME ${exe} COMMAND sh -c
      "if setarch \"$(uname -m)\" -R true 2>/dev/null; then exec setarch \"$(uname -m)\" -R \"$@\"; else exec \"$@\"; fi"
      ${exe} $<TARGET_FILE:${exe}> ${T_ARGS})
    set(env "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1" ${T_ENV})
    set_tests_properties(${exe} PROPERTIES TIMEOUT 600 LABELS tsan ENVIRONMENT "${env}")
  endforeach()
endfunction()
