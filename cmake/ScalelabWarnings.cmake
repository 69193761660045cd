# Compiler flags shared by every scalelab target: warnings on, sanitizers on request.
add_library(scalelab_flags INTERFACE)
target_compile_options(scalelab_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>)
if(SCALELAB_WERROR)
  target_compile_options(scalelab_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(SCALELAB_SANITIZE)
  target_compile_options(scalelab_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(scalelab_flags INTERFACE -fsanitize=address,undefined)
endif()
