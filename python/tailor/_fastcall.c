/* tailor._fastcall: the per-call path of tailor.moe.experts in C.
 *
 * The ctypes path builds six tailor_tensor structs field by field in
 * Python (~30 us a call); this module reads numpy arrays (buffer protocol)
 * and torch tensors (data_ptr, shape, stride, dtype, device) in C and calls
 * tailor_moe_experts through the pointer ctypes resolved, so the library is
 * loaded once, by ctypes. Optional: without a compiler or Python headers at
 * install time the package uses the ctypes path.
 *
 *   init(experts_fn: int)                    the address of tailor_moe_experts
 *   init_torch(Tensor, f32, bf16, f16, i32, i64, u8, f64)
 *   experts(runtime, ws, hidden, w13, w2, topk_weights, topk_ids, out,
 *           stream) -> tailor_status          (pointers as ints)
 *                   -> None: an argument this path does not view (not a
 *                      buffer or torch tensor, a buffer format without a
 *                      tailor dtype such as ml_dtypes' bfloat16, a read-only
 *                      out); the caller takes the general path, which views
 *                      it or raises the error naming it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "tailor/c_api.h"

typedef tailor_status (*ExpertsFn)(tailor_runtime*,
                                   const tailor_moe_experts_args*,
                                   tailor_moe_workspace*);
static ExpertsFn experts_fn = NULL;

enum { kTorchDtypes = 7 };
static PyObject* torch_tensor_type = NULL;
static PyObject* torch_dtypes[kTorchDtypes] = {0}; /* index = tailor dtype-1 */

static int DtypeOfFormat(const char* format, Py_ssize_t itemsize) {
  if (format == NULL) return TAILOR_DTYPE_U8;
  char c = format[0];
  if (c == '<' || c == '=' || c == '@') c = format[1];
  switch (c) {
    case 'f': return itemsize == 4 ? TAILOR_DTYPE_F32 : 0;
    case 'd': return itemsize == 8 ? TAILOR_DTYPE_F64 : 0;
    case 'e': return itemsize == 2 ? TAILOR_DTYPE_F16 : 0;
    case 'i': case 'l': case 'q':
      return itemsize == 4 ? TAILOR_DTYPE_I32
             : itemsize == 8 ? TAILOR_DTYPE_I64 : 0;
    case 'B': return TAILOR_DTYPE_U8;
    default: return 0;
  }
}

/* Fill's results: viewed, or left to the general path (no error set). */
enum { kViewed = 0, kNotViewed = 1 };

/* A numpy array (or any buffer of a supported format). */
static int FromBuffer(PyObject* obj, tailor_tensor* t, int writable) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    PyErr_Clear(); /* e.g. ValueError for ml_dtypes' bfloat16 format */
    return kNotViewed;
  }
  int status = kViewed;
  t->dtype = DtypeOfFormat(view.format, view.itemsize);
  if (t->dtype == 0 || view.ndim > TAILOR_MAX_RANK ||
      (writable && view.readonly)) {
    status = kNotViewed;
  }
  for (int d = 0; status == kViewed && d < view.ndim; ++d) {
    if (view.strides[d] % view.itemsize != 0) status = kNotViewed;
    t->dims[d] = view.shape[d];
    t->strides[d] = view.strides[d] / view.itemsize;
  }
  t->data = view.buf;
  t->rank = view.ndim;
  t->device_type = TAILOR_DEVICE_CPU;
  t->device_index = 0;
  PyBuffer_Release(&view); /* the caller's object keeps the memory */
  return status;
}

static int TupleToInt64(PyObject* seq, int64_t* out, int rank) {
  for (int d = 0; d < rank; ++d) {
    out[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, d));
  }
  return PyErr_Occurred() ? -1 : 0;
}

/* 0, kNotViewed (an unsupported dtype or rank) or -1 (raised). */
static int FromTorch(PyObject* obj, tailor_tensor* t) {
  PyObject* dtype = PyObject_GetAttrString(obj, "dtype");
  PyObject* ptr = PyObject_CallMethod(obj, "data_ptr", NULL);
  PyObject* shape = PyObject_CallMethod(obj, "size", NULL);
  PyObject* strides = PyObject_CallMethod(obj, "stride", NULL);
  PyObject* device = PyObject_CallMethod(obj, "get_device", NULL);
  int status = -1;
  if (!dtype || !ptr || !shape || !strides || !device) goto done;
  t->dtype = 0;
  for (int i = 0; i < kTorchDtypes; ++i) {
    if (torch_dtypes[i] == dtype) t->dtype = i + 1;
  }
  Py_ssize_t rank = PyTuple_Size(shape);
  if (t->dtype == 0 || rank < 0 || rank > TAILOR_MAX_RANK ||
      !PyTuple_Check(strides) || PyTuple_Size(strides) != rank) {
    PyErr_Clear();
    status = kNotViewed;
    goto done;
  }
  t->rank = (int32_t)rank;
  t->data = PyLong_AsVoidPtr(ptr);
  if (TupleToInt64(shape, t->dims, t->rank) ||
      TupleToInt64(strides, t->strides, t->rank)) {
    goto done;
  }
  long index = PyLong_AsLong(device); /* -1: cpu */
  t->device_type = index < 0 ? TAILOR_DEVICE_CPU : TAILOR_DEVICE_CUDA;
  t->device_index = index < 0 ? 0 : (int32_t)index;
  status = PyErr_Occurred() ? -1 : 0;
done:
  Py_XDECREF(dtype);
  Py_XDECREF(ptr);
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  Py_XDECREF(device);
  return status;
}

static int Fill(PyObject* obj, tailor_tensor* t, int writable) {
  memset(t, 0, sizeof(*t));
  if (torch_tensor_type != NULL &&
      PyObject_TypeCheck(obj, (PyTypeObject*)torch_tensor_type)) {
    return FromTorch(obj, t);
  }
  return FromBuffer(obj, t, writable);
}

static PyObject* Init(PyObject* self, PyObject* args) {
  PyObject* address;
  if (!PyArg_ParseTuple(args, "O", &address)) return NULL;
  experts_fn = (ExpertsFn)PyLong_AsVoidPtr(address);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

static PyObject* InitTorch(PyObject* self, PyObject* args) {
  PyObject* type;
  PyObject* dtypes[kTorchDtypes];
  if (!PyArg_ParseTuple(args, "OOOOOOOO", &type, &dtypes[0], &dtypes[1],
                        &dtypes[2], &dtypes[3], &dtypes[4], &dtypes[5],
                        &dtypes[6])) {
    return NULL;
  }
  Py_INCREF(type);
  torch_tensor_type = type;
  for (int i = 0; i < kTorchDtypes; ++i) {
    Py_INCREF(dtypes[i]);
    torch_dtypes[i] = dtypes[i];
  }
  Py_RETURN_NONE;
}

static PyObject* Experts(PyObject* self, PyObject* const* args,
                         Py_ssize_t nargs) {
  if (nargs != 9 || experts_fn == NULL) {
    PyErr_SetString(PyExc_TypeError,
                    "experts(runtime, ws, hidden, w13, w2, topk_weights, "
                    "topk_ids, out, stream) after init()");
    return NULL;
  }
  tailor_moe_experts_args call;
  memset(&call, 0, sizeof(call));
  tailor_tensor* slots[6] = {&call.hidden, &call.w13, &call.w2,
                             &call.topk_weights, &call.topk_ids, &call.out};
  for (int i = 0; i < 6; ++i) {
    const int status = Fill(args[2 + i], slots[i], slots[i] == &call.out);
    if (status < 0) return NULL;
    if (status == kNotViewed) Py_RETURN_NONE;
  }
  void* runtime = PyLong_AsVoidPtr(args[0]);
  void* ws = PyLong_AsVoidPtr(args[1]);
  call.stream = args[8] == Py_None ? NULL : PyLong_AsVoidPtr(args[8]);
  if (PyErr_Occurred()) return NULL;
  tailor_status status;
  Py_BEGIN_ALLOW_THREADS
  status = experts_fn((tailor_runtime*)runtime, &call,
                      (tailor_moe_workspace*)ws);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(status);
}

static PyMethodDef kMethods[] = {
    {"init", Init, METH_VARARGS, "init(address of tailor_moe_experts)"},
    {"init_torch", InitTorch, METH_VARARGS,
     "init_torch(torch.Tensor, f32, bf16, f16, i32, i64, u8, f64)"},
    {"experts", (PyCFunction)(void (*)(void))Experts, METH_FASTCALL,
     "experts(runtime, ws, hidden, w13, w2, topk_weights, topk_ids, out, "
     "stream) -> status, or None for the general path"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_fastcall",
                                     NULL, -1, kMethods};

PyMODINIT_FUNC PyInit__fastcall(void) { return PyModule_Create(&kModule); }
