# CTest driver: install the build into a scratch prefix, then build and run a consumer project
# that finds it through find_package(foxhunt) and through pkg-config, and the same program
# compiled by hand with pkg-config's flags.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed")
endif()
set(ENV{PKG_CONFIG_PATH} ${WORK}/prefix/lib/pkgconfig)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/b -DCMAKE_PREFIX_PATH=${WORK}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer configure failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/b RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer build failed")
endif()
# No LD_LIBRARY_PATH: both must find the library through their rpath (CMake's for the imported
# target foxhunt::foxhunt, the .pc file's -Wl,-rpath for pkg-config).
unset(ENV{LD_LIBRARY_PATH})
# A plain compiler line, as a Makefile user writes it: cc main.c $(pkg-config --cflags --libs).
execute_process(COMMAND pkg-config --cflags --libs foxhunt OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "pkg-config --cflags --libs foxhunt failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
execute_process(COMMAND ${CC} ${SRC}/main.c ${flags} -o ${WORK}/b/consumer_cc RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "cc main.c $(pkg-config --cflags --libs foxhunt) failed")
endif()
foreach(exe consumer consumer_pc consumer_cc)
  execute_process(COMMAND ${WORK}/b/${exe} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "${exe} failed (${rc})")
  endif()
endforeach()
