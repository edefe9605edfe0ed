/* client_linked.c: loading pattern 1, a program linked against libcublas and
 * libcublasLt (built once per cuBLAS major version, client_linked_cuN). */
#include "client.h"

int main(int argc, char **argv) { return gemm_suite_main(argc, argv); }
