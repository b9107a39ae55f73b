/* agent-runner-keeper: see keeper.h. */
#include "keeper.h"

int main(int argc, char **argv)
{
    return keeper_main(argc, argv);
}
