# Writes OUT: a C++ file defining kfuse::codegen::embedded_templates(), the contents of every
# DIR/*.cuh as a raw string literal keyed by file name.
file(GLOB files RELATIVE ${DIR} ${DIR}/*.cuh)
list(SORT files)
set(body "")
foreach(f ${files})
  file(READ ${DIR}/${f} text)
  set(body "${body}      {\"${f}\", R\"KFUSE_TEMPLATE(${text})KFUSE_TEMPLATE\"},\n")
endforeach()
file(WRITE ${OUT}.tmp
"// Generated from templates/*.cuh by cmake/embed_templates.cmake. Do not edit.
#include \"compiler/codegen/embedded_templates.h\"

namespace kfuse::codegen {
const std::map<std::string, std::string> &embedded_templates() {
  static const std::map<std::string, std::string> files = {
${body}  };
  return files;
}
} // namespace kfuse::codegen
")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
