#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct { uint8_t palette, start; uint8_t r[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((packed)) cfg_t;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) { perror("arch_prctl"); return 1; }
  int M = argc>1?atoi(argv[1]):16;
  cfg_t c; memset(&c,0,sizeof c); c.palette=1;
  // tile0: C M x 16 fp32 ; tile1: A M x 32 bf16 (64B) ; tile2: B 16 x 64B (K/2=16 rows of 16 pairs)
  for(int t=0;t<4;t++){c.rows[t]=M; c.colsb[t]=64;}
  c.rows[2]=16; c.colsb[2]=64; c.rows[3]=16;c.colsb[3]=64;
  _tile_loadconfig(&c);
  // weights: N=576 out rows? emulate streaming B tiles from a buffer of size W bytes
  size_t nb = 576*576*2/1024; // number of 1KB B tiles for a 576x576 bf16 matrix
  uint16_t *B = aligned_alloc(64, nb*1024); for(size_t i=0;i<nb*512;i++)B[i]=0x3f80;
  uint16_t A[16*32]; for(int i=0;i<16*32;i++)A[i]=0x3f80;
  float C[16*16];
  _tile_zero(0); _tile_loadd(1, A, 64);
  int reps=2000; double t0=now();
  for(int r=0;r<reps;r++){
    for(size_t b=0;b<nb;b++){ _tile_loadd(2, B+b*512, 64); _tile_dpbf16ps(0,1,2); }
  }
  double dt=now()-t0;
  _tile_stored(0,C,64);
  double macs = (double)reps*nb*M*16*32;
  printf("M=%d: %.1f GMAC/s (bf16 AMX, one core, B from L2-ish %zu KB) C0=%g\n",M,macs/dt/1e9,nb,C[0]);
  _tile_release();
  return 0;
}
