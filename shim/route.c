/* route.c: hands a call decided for a non-native route to that route's
 * file. A route that cannot run the call declines (reason recorded) and the
 * hook runs it native: never a wrong answer, never a lost call. */
#include "shim.h"

int route_run(gs_call *c) {
  switch (c->decided) {
    case GS_ROUTE_FFMA:
      return route_ffma(c);
    case GS_ROUTE_FP8:
      return route_fp8(c);
    default:
      return GS_DECLINED;
  }
}
