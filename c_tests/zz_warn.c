#include "rdm4.h"
int main(void) { int unused; return 0; }
